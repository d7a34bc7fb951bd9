"""A Redis Cluster master dies (SIGKILL) during a run: its replica is promoted, nothing is lost.

A private cluster of 3 masters and 3 replicas (``redis_cluster.py``, AOF ``everysec``) for
the module. The test sends its tasks (``faults.record``, 5 ms each) to one queue, whose
slot is on one master; a worker of two processes runs them. When a third of them have run,
the master that serves the queue's slot is SIGKILLed and its replica is made master at once
with ``CLUSTER FAILOVER TAKEOVER`` (the cluster would promote it by itself after
``cluster-node-timeout``; TAKEOVER keeps the test short).

Redis replication is asynchronous: writes the dead master acknowledged but had not sent to
its replica are gone. What the broker guarantees is what it can: every task whose enqueue
had reached the replica runs, a task whose settle was lost runs again (its claim is on the
replica, its lease runs out), the worker carries on without a restart. Here the tasks are
all sent before the kill, and the test waits for the replica to have the queue's keys
(``WAIT 1``) before it starts the worker, so lost must be 0.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from potatoq.brokers.base import BrokerConfig
from tests import services

from .harness import FaultEnv, client, report, sized, wait_for
from .redis_cluster import RedisCluster, available

TASKS = sized(300, 2000)
CHILDREN = 2
KILL_AT = TASKS // 3
WORK_MS = 5.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    reason = available()
    if reason is not None:
        if services.IN_CI:
            pytest.fail(f"Redis Cluster: {reason}", pytrace=False)
        pytest.skip(reason)
    instance = RedisCluster()
    try:
        instance.start()
        yield instance
    finally:
        instance.stop()


def test_a_killed_master_loses_no_task(cluster: RedisCluster, tmp_path: Path) -> None:
    prefix = "pqfail"
    env = FaultEnv(
        tmp_path,
        BrokerConfig(url=cluster.url, transport_options={"global_keyprefix": prefix}),
        "redis-cluster",
        broker_connection_timeout=10.0,
        worker_dead_after=5.0,
    )
    try:
        with client(env) as proj:
            broker = proj.app.broker
            queue = proj.app.conf.task_default_queue
            sent = [proj.record.delay(n, WORK_MS).id for n in range(TASKS)]
            slot_key = broker.keys.of_queue(queue)
            rc = broker._client()
            master = rc.get_node_from_key(slot_key).port
            replica = cluster.replica_of(master)
            with redis.Redis(port=master) as direct:
                assert direct.execute_command("WAIT", 1, 5000) >= 1  # the replica has the tasks
            worker = env.worker("-c", str(CHILDREN), "-l", "info")
            wait_for(lambda: len(env.executions()) >= KILL_AT, 120, f"{KILL_AT} runs")
            started_kill = time.monotonic()
            cluster.kill(master)
            cluster.failover(replica)
            promoted = time.monotonic()
            before = len(env.executions())
            resumed_at = wait_for(
                lambda: len(env.executions()) > before + CHILDREN and time.monotonic(),
                60,
                "runs after the failover",
            )

            def missing() -> set[str]:
                return set(sent) - {task_id for task_id, _, _ in env.executions()}

            wait_for(lambda: not missing(), 180, "every sent task to run")
            runs = env.executions()
            twice = {t: n for t, n in Counter(t for t, _, _ in runs).items() if n > 1}
            children = {ppid for _, _, ppid in runs}
            alive = worker.alive()
            dead = broker.list_dead(limit=100)
            figures = {
                "tasks": len(sent),
                "lost": len(missing()),
                "tasks_run_twice": len(twice),
                "promotion_seconds": round(promoted - started_kill, 2),
                "first_runs_after_promotion_seconds": round(resumed_at - promoted, 2),
            }
            report("redis cluster master killed", "redis-cluster", **figures)
            worker.stop()
    finally:
        env.close(failed=True)
        cluster.start_node(master)  # it comes back as a replica of the promoted one

    assert not missing(), f"{len(missing())} sent tasks never ran: {figures}"
    assert not dead, [(d.id, d.reason) for d in dead[:5]]
    assert alive, "the worker died"
    assert len(children) == 1, f"the worker was restarted: supervisors {children}"


def test_moving_a_queue_slot_while_tasks_run_loses_none(cluster: RedisCluster, tmp_path: Path) -> None:
    """The queue's slot moves to another master (all its keys in one MIGRATE) while the
    worker runs the queue's tasks: every task runs, none is dead-lettered, no restart."""
    env = FaultEnv(
        tmp_path,
        BrokerConfig(url=cluster.url, transport_options={"global_keyprefix": "pqmove"}),
        "redis-cluster",
        broker_connection_timeout=10.0,
        worker_dead_after=5.0,
    )
    try:
        with client(env) as proj:
            broker = proj.app.broker
            sent = [proj.record.delay(n, WORK_MS).id for n in range(TASKS)]
            route = broker.keys.of_queue(proj.app.conf.task_default_queue) + "seq"
            rc = broker._client()
            slot = rc.keyslot(route)
            source = rc.get_node_from_key(route).port
            target = next(p for p in cluster.master_ports() if p != source)
            worker = env.worker("-c", str(CHILDREN), "-l", "info")
            wait_for(lambda: len(env.executions()) >= KILL_AT, 120, f"{KILL_AT} runs")
            started = time.monotonic()
            moved = cluster.move_slot(slot, source, target)
            took = time.monotonic() - started
            extra = [proj.record.delay(n, WORK_MS).id for n in range(TASKS, TASKS + 20)]  # after the move
            sent += extra

            def missing() -> set[str]:
                return set(sent) - {task_id for task_id, _, _ in env.executions()}

            wait_for(lambda: not missing(), 180, "every sent task to run")
            runs = env.executions()
            twice = {t: n for t, n in Counter(t for t, _, _ in runs).items() if n > 1}
            children = {ppid for _, _, ppid in runs}
            alive = worker.alive()
            dead = broker.list_dead(limit=100)
            now_on = broker._client().get_node_from_key(route).port
            report(
                "redis cluster slot moved",
                "redis-cluster",
                tasks=len(sent),
                lost=len(missing()),
                tasks_run_twice=len(twice),
                keys_moved=moved,
                move_seconds=round(took, 2),
            )
            worker.stop()
    finally:
        env.close(failed=True)

    assert now_on == target
    assert not missing()
    assert not dead, [(d.id, d.reason) for d in dead[:5]]
    assert alive, "the worker died"
    assert len(children) == 1, f"the worker was restarted: supervisors {children}"
