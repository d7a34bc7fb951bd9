"""A claim that committed but whose reply was lost, under a live worker (issue 24).

The broker's fault hook (``potatoq.brokers.faults``, set by ``tests/faults/proj.py``) makes
the first claim of a ``faults.add`` task commit and then raise as if the connection dropped:
the row names a live node and a live child that never got the task. Recovery skips live
nodes and the orphan sweep live pids; on a broker without leases only the supervisor, which
sees that no thread of the child runs it, can give it back. Lease brokers free it when the
lease runs out; RabbitMQ's claims end with their channel.
"""

from __future__ import annotations

import pytest

from .harness import FaultEnv, client, wait_for

DEAD_AFTER = 2.0  # the supervisor's grace for a claim no thread runs
POOLS = {"prefork": ("-c", "1"), "solo": ("-P", "solo")}


@pytest.mark.parametrize("pool", list(POOLS))
@pytest.mark.parametrize("fault_env", ["sqlite", "postgres"], indirect=True)
def test_a_claim_whose_reply_was_lost_is_requeued_by_the_supervisor(fault_env: FaultEnv, pool: str) -> None:
    conf = {"worker_dead_after": DEAD_AFTER, "test_lose_claim_reply": "faults.add"}
    worker = fault_env.worker(*POOLS[pool], "-Q", "default", conf=conf)
    with client(fault_env) as proj:
        result = proj.add.delay(2, 3)
        lost = fault_env.wait_marker(f"reply-lost-{result.id}")
        assert result.get(timeout=60) == 5
        # the process that lost the reply was alive all along: only the reply was gone
        assert worker.alive() and lost["pid"] in (worker.pid, *worker.children())
    wait_for(lambda: "requeued" in worker.output(), what="the supervisor's log line")
    assert "reply was lost" in worker.output()


@pytest.mark.parametrize("pool", list(POOLS))
@pytest.mark.parametrize("fault_env", ["sqlite", "postgres"], indirect=True)
def test_a_next_claim_lost_after_settle_and_claim_committed_is_requeued(
    fault_env: FaultEnv, pool: str
) -> None:
    conf = {"worker_dead_after": DEAD_AFTER, "test_lose_claim_reply": "faults.add"}
    worker = fault_env.worker(*POOLS[pool], "-Q", "default", conf=conf)
    with client(fault_env) as proj:
        busy = proj.record.delay(1, work_ms=1500)
        wait_for(fault_env.executions, what="the first task to start")
        # the only thread is busy: it claims this one in the same call that settles the first
        result = proj.add.delay(2, 3)
        lost = fault_env.wait_marker(f"reply-lost-{result.id}")
        assert lost["operation"] == "settle_and_claim"
        assert busy.get(timeout=60) == 1
        assert result.get(timeout=60) == 5
    assert "reply was lost" in worker.output()
