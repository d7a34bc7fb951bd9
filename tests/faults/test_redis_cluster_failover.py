"""A Redis Cluster loses a master, or moves a queue's slot, during a run: nothing is lost.

A private cluster of 3 masters and 3 replicas (``redis_cluster.py``, AOF ``everysec``), of
Redis 7 and then of Valkey 8. Each test sends its tasks (``faults.record``, 5 ms each) to one queue, whose
slot is on one master, waits until the replica has them (``WAIT 1``), and starts a worker
of two processes. When a third have run:

* ``killed master``: the master serving the queue's slot is SIGKILLed and its replica made
  master, at once with ``CLUSTER FAILOVER TAKEOVER``, or by the cluster itself once the
  master has been silent for ``cluster-node-timeout`` (1.5 s here). Redis replication is
  asynchronous, so a write the master acknowledged but hadn't sent is gone with it: a lost
  settle means a second run (the claim is on the replica, its lease runs out), a lost
  enqueue a lost task, which is why the tasks are replicated before the kill;
* ``slot moved``: the queue's slot moves to another master, all its keys in one
  ``MIGRATE`` (``RedisCluster.move_slot``).

Then 20 more tasks are sent. Every task runs (lost = 0), none is dead-lettered, the worker
is never restarted.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="module", params=["redis", "valkey"])
def cluster(request: pytest.FixtureRequest) -> Iterator[RedisCluster]:
    reason = available(request.param)
    if reason is not None:
        if services.IN_CI:
            pytest.fail(f"{request.param} cluster: {reason}", pytrace=False)
        pytest.skip(reason)
    instance = RedisCluster(server=request.param)
    try:
        instance.start()
        yield instance
    finally:
        instance.stop()


def run_through(
    cluster: RedisCluster, tmp_path: Path, prefix: str, disrupt: Callable[[Any, str], dict[str, Any]]
) -> dict[str, Any]:
    """Send TASKS tasks, start a worker of CHILDREN processes, call ``disrupt(proj, route)``
    (``route``: the key that routes the queue's calls) after KILL_AT runs, wait for every
    task to run; the figures, with lost, tasks run twice, dead letters, restarts."""
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
            sent = [proj.record.delay(n, WORK_MS).id for n in range(TASKS)]
            route = broker.keys.of_queue(proj.app.conf.task_default_queue) + "seq"
            master = broker._client().get_node_from_key(route).port
            with redis.Redis(port=master) as direct:
                # The replica has the tasks. (After the previous test's failover it may still
                # be resyncing with its master: WAIT answers 0 until it is back, so ask again.)
                wait_for(lambda: direct.execute_command("WAIT", 1, 1000) >= 1, 60, "the replica's ack")
            worker = env.worker("-c", str(CHILDREN), "-l", "info")
            wait_for(lambda: len(env.executions()) >= KILL_AT, 120, f"{KILL_AT} runs")
            figures = disrupt(proj, route)
            before = len(env.executions())
            resumed_at = wait_for(
                lambda: len(env.executions()) > before + CHILDREN and time.monotonic(), 60, "runs after it"
            )
            sent += [proj.record.delay(n, WORK_MS).id for n in range(TASKS, TASKS + 20)]  # sent after it

            def missing() -> set[str]:
                return set(sent) - {task_id for task_id, _, _ in env.executions()}

            wait_for(lambda: not missing(), 180, "every sent task to run")
            runs = env.executions()
            figures.update(
                tasks=len(sent),
                lost=len(missing()),
                tasks_run_twice=sum(1 for n in Counter(t for t, _, _ in runs).values() if n > 1),
                first_runs_after_seconds=round(resumed_at - figures.pop("done_at"), 2),
                dead=[(d.id, d.reason) for d in broker.list_dead(limit=100)],
                supervisors=len({ppid for _, _, ppid in runs}),
                alive=worker.alive(),
            )
            worker.stop()
            return figures
    finally:
        env.close(failed=True)


def check(figures: dict[str, Any]) -> None:
    assert figures["lost"] == 0, figures
    assert not figures["dead"], figures
    assert figures["alive"], "the worker died"
    assert figures["supervisors"] == 1, f"the worker was restarted: {figures}"


@pytest.mark.parametrize("promotion", ["takeover", "automatic"])
def test_a_killed_master_loses_no_task(cluster: RedisCluster, tmp_path: Path, promotion: str) -> None:
    killed: list[int] = []

    def kill_the_queue_master(proj: Any, route: str) -> dict[str, Any]:
        master = proj.app.broker._client().get_node_from_key(route).port
        replica = cluster.replica_of(master)
        started = time.monotonic()
        cluster.kill(master)
        killed.append(master)
        if promotion == "takeover":
            cluster.failover(replica)
        else:  # the cluster's own: once the master is silent for cluster-node-timeout
            wait_for(lambda: cluster.role(replica) == "master", 30, "the replica's promotion")
        return {
            "promotion": promotion,
            "promotion_seconds": round(time.monotonic() - started, 2),
            "done_at": time.monotonic(),
        }

    try:
        figures = run_through(cluster, tmp_path, "pqfail", kill_the_queue_master)
    finally:
        for port in killed:
            cluster.start_node(port)  # it comes back as a replica of the promoted one
    report("redis cluster master killed", f"{cluster.server}-cluster", **figures)
    check(figures)


def test_moving_a_queue_slot_while_tasks_run_loses_none(cluster: RedisCluster, tmp_path: Path) -> None:
    """The queue's slot moves to another master (all its keys in one MIGRATE) mid-run."""
    target: list[int] = []

    def move_the_queue_slot(proj: Any, route: str) -> dict[str, Any]:
        rc = proj.app.broker._client()
        source = rc.get_node_from_key(route).port
        target.append(next(p for p in cluster.master_ports() if p != source))
        started = time.monotonic()
        moved = cluster.move_slot(rc.keyslot(route), source, target[0])
        return {
            "keys_moved": moved,
            "move_seconds": round(time.monotonic() - started, 2),
            "done_at": time.monotonic(),
        }

    figures = run_through(cluster, tmp_path, "pqmove", move_the_queue_slot)
    report("redis cluster slot moved", f"{cluster.server}-cluster", **figures)
    check(figures)
