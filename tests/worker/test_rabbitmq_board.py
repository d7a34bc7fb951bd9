"""RabbitMQ workers' children write what each thread runs to a shared board (the start
line, message included: ``ipc.CarryBoard``) instead of the pipe: the supervisor still knows
every running task, for heartbeats and for a child that dies, on real worker processes
against RabbitMQ 4 (``POTATOQ_TEST_RABBITMQ_URL``). Everything waits on markers, heartbeats
and log lines; nothing is timed."""

from __future__ import annotations

import pytest

from tests.worker.conftest import Env, wait_for
from tests.worker.test_rabbitmq_prefetch import rabbit_env, rclient

__all__ = ["rabbit_env", "rclient"]  # fixtures, used by name

pytestmark = pytest.mark.slow


def test_a_heartbeat_lists_what_each_thread_runs(rabbit_env: Env, rclient) -> None:
    worker = rabbit_env.worker("-c", "1", "-t", "2", "-n", "board@test")
    first = rclient.block.delay("one", release="go")
    second = rclient.block.delay("two", release="go")
    rabbit_env.wait_marker("started-one")
    rabbit_env.wait_marker("started-two")

    def both() -> list:
        return [w for w in rclient.app.broker.workers() if len(w.running) == 2]

    (info,) = wait_for(both, what="a heartbeat with both running tasks")
    assert sorted((t.task, t.task_id) for t in info.running) == sorted(
        [("proj.block", first.id), ("proj.block", second.id)]
    )
    rabbit_env.mark("go")
    assert first.get(timeout=30) and second.get(timeout=30)
    assert worker.stop() == 0


def test_a_child_that_dies_is_known_to_have_held_its_task(rabbit_env: Env, rclient) -> None:
    worker = rabbit_env.worker("-c", "1")
    result = rclient.crash_self.delay("sigkill")
    pid = rabbit_env.wait_marker(f"crash-{result.id}-1")
    line = f"proj.crash_self[{result.id}] lost with child {pid}; the broker will redeliver it"
    wait_for(lambda: line in worker.output(), what="the supervisor's log of the lost task")
    worker.stop()
