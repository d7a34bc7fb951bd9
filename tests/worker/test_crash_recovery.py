"""At-least-once across child crashes: requeued at once, dead-lettered after 5 crashes."""

from __future__ import annotations

import os
import signal

import pytest

from potatoq.exceptions import WorkerLostError

from .conftest import wait_for

pytestmark = pytest.mark.slow


def test_task_of_a_killed_child_completes_once_the_child_is_replaced(broker_env, broker_client):
    env, client = broker_env, broker_client
    worker = env.worker("-c", "1")
    result = client.block.delay("a", release="go")
    first = env.wait_marker("started-a")
    assert first["delivery"] == 1
    os.kill(first["pid"], signal.SIGKILL)
    # the supervisor requeues at once and a new child takes it (no dead_after wait)
    second = wait_for(
        lambda: (m := env.marker("started-a")) and m["pid"] != first["pid"] and m, what="redelivery"
    )
    assert second["delivery"] == 2
    assert first["pid"] not in worker.children()
    env.mark("go")
    assert result.get(timeout=30) == second["pid"]
    assert client.add.delay(1, 2).get(timeout=30) == 3
    assert worker.stop() == 0


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_task_killing_its_own_process_is_dead_lettered_after_five_deliveries(broker_env, broker_client, how):
    env, client = broker_env, broker_client
    worker = env.worker("-c", "2")
    doomed = client.crash_self.delay(how)
    others = [client.add.delay(i, i) for i in range(20)]
    with pytest.raises(WorkerLostError):
        doomed.get(timeout=60)
    assert [r.get(timeout=30) for r in others] == [i + i for i in range(20)]
    assert env.markers(f"crash-{doomed.id}-") == [f"crash-{doomed.id}-{n}" for n in range(1, 6)]
    dead = client.app.broker.list_dead()
    assert [(d.id, d.deliveries) for d in dead] == [(doomed.id, 5)]
    assert "WorkerLostError" in dead[0].reason
    # the worker keeps running, with a full set of children
    assert client.add.delay(2, 2).get(timeout=30) == 4
    # the replacement of the last crashed child may still be starting: wait for it
    wait_for(lambda: len(worker.children()) == 2, what="a full set of children")
    assert worker.stop() == 0


def test_worker_recovers_tasks_of_a_silent_node(broker_env, broker_client):
    env, client = broker_env, broker_client
    from potatoq.brokers.base import WorkerRef

    if not client.app.broker.capabilities.recovers_dead_holders:
        pytest.skip(f"{env.name} requeues a dead holder's tasks itself (its connection closed)")
    client.app.conf.worker_dead_after = 1.0  # the ghost's claim (or lease) goes stale after 1 s
    client.app.close()
    result = client.add.delay(20, 22)
    ghost = client.app.broker.claim(["default"], WorkerRef("ghost@nowhere:1-dead", 999999))
    assert ghost is not None and ghost.id == result.id  # held by a node that never heartbeats
    worker = env.worker("-c", "1", conf={"worker_dead_after": 1.0})
    assert result.get(timeout=30) == 42
    assert worker.stop() == 0
    assert "recovered tasks of dead workers: 1 requeued" in worker.output()


def test_leases_of_long_tasks_are_extended_so_they_are_not_redelivered(broker_env, broker_client):
    env, client = broker_env, broker_client
    if not client.app.broker.capabilities.leases:
        pytest.skip(f"{env.name} doesn't use leases")
    # claims expire after worker_dead_after (2 s) unless the supervisor extends them
    worker = env.worker("-c", "1", conf={"worker_dead_after": 2.0})
    result = client.block.delay("long", timeout=5.0)
    assert env.wait_marker("started-long")["delivery"] == 1
    assert result.get(timeout=30)
    assert env.marker("started-long")["delivery"] == 1  # never delivered again
    assert worker.stop() == 0
