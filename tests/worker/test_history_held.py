"""A worker writes the task-history records it holds (brokers.history_buffer) when it stops:
a graceful shutdown loses none."""

from __future__ import annotations

import signal
from typing import Any

from potatoq.brokers.base import HistoryQuery

from .conftest import Env, wait_for


def test_a_stopping_worker_writes_the_records_it_holds(env: Env, client: Any) -> None:
    # Sent before the worker starts, so it runs them back to back (settle-and-claim) and
    # never waits for work: the records stay held until it stops.
    added = [client.add.delay(i, 1) for i in range(2)]
    blocked = client.block.delay("x", release="go-x")
    worker = env.worker("-c", "1")
    env.wait_marker("started-x")
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "shutting down" in worker.output(), what="shutdown to begin")
    env.mark("go-x")
    assert worker.wait() == 0
    records = client.app.broker.history(HistoryQuery()).records
    # the last record was made after the last settle: only the stopping slot wrote it
    assert [r.task_id for r in records] == [blocked.id, *(r.id for r in reversed(added))]
    assert {r.state for r in records} == {"SUCCESS"}
