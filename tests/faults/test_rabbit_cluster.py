"""A RabbitMQ 4 node dies (SIGKILL) during a run: the worker fails over to another node of the cluster.

One three-node cluster (``rabbit_cluster.py``) serves the module. Each test sends its tasks
through a producer connected to one node, which therefore leads the quorum queue (RabbitMQ
places a new queue's leader on the declaring client's node); the queue has a member on
every node. A worker of two processes is given the cluster's three URLs with *another*
node first, so its connections land there. From the worker's first run on, the producer
goes on sending a task every 10 ms, through the kill. When a third of the tasks have run,
one node is SIGKILLed:

* ``connected``: the node the worker's connections are on (not the queue's leader). The
  worker's deliveries in flight return to the queue; its link goes on to the next URL,
  re-declares its queues and restarts its consumers; the scheduler token (held by this
  worker, the only one) is held again once it is back;
* ``leader``: the node that leads the queue (the worker is connected elsewhere). The two
  other members elect a new leader; the worker's connection stays up. The producer's
  connection was on that node: its ``.delay()`` calls go on to the next node.

Afterwards: lost = 0 (every task whose ``.delay()`` returned ran), nothing dead-lettered,
the worker process never restarted, and a task ran twice only if it was unacked at the
kill: at most one per worker process (prefetch 1, one band queue). The killed node is
started again at the end (it rejoins from its data folder), so each test begins with
three running nodes.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig
from potatoq.brokers.rabbitmq import RabbitMQBroker
from potatoq.exceptions import OperationalError
from tests import services

from . import servers
from .harness import FaultEnv, client, report, sized, wait_for
from .rabbit_cluster import RabbitCluster, logs

TASKS = sized(240, 2000)
CHILDREN = 2
KILL_AT = TASKS // 3  # recorded runs before the node is killed
WORK_MS = 5.0  # each task works this long, so that tasks are in flight at the kill
HOLDS = "now holds the periodic-scheduler token"
HOURLY = {"hourly": {"task": "faults.add", "schedule": 3600.0, "args": [1, 2]}}


@pytest.fixture(scope="module")
def cluster() -> Iterator[RabbitCluster]:
    reason = servers.available("rabbitmq")
    if reason is not None:
        if services.IN_CI:
            pytest.fail(f"RabbitMQ cluster: {reason}", pytrace=False)
        pytest.skip(reason)
    instance = RabbitCluster()
    try:
        instance.start()
        yield instance
    except BaseException:
        print(logs(instance))
        raise
    finally:
        instance.close()


class Producer(threading.Thread):
    """Sends ``faults.record`` tasks one ``.delay()`` at a time until stopped; notes what each did."""

    def __init__(self, proj: Any, every: float) -> None:
        super().__init__(daemon=True)
        self.proj, self.every = proj, every
        self.stopping = threading.Event()
        self.sent: list[tuple[str, float]] = []  # (task id, when its .delay() returned)
        self.refused: list[str] = []
        self.other: list[BaseException] = []
        self.slowest = 0.0

    def run(self) -> None:
        n = TASKS
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self.sent.append((self.proj.record.delay(n, WORK_MS).id, time.monotonic()))
            except OperationalError as exc:
                self.refused.append(str(exc))
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.other.append(exc)
            self.slowest = max(self.slowest, time.monotonic() - started)
            n += 1
            self.stopping.wait(self.every)


def token_held(url: str, queue: str) -> bool:
    """Whether a consumer holds the scheduler token: one consumer at least, no ready token."""
    try:
        connection = pika.BlockingConnection(pika.URLParameters(url + "?connection_attempts=1"))
    except pika.exceptions.AMQPError:
        return False
    try:
        frame = connection.channel().queue_declare(queue, passive=True)
        return bool(frame.method.consumer_count >= 1 and frame.method.message_count == 0)
    except pika.exceptions.AMQPError:
        return False  # not declared yet, or the queue has no leader for the moment
    finally:
        if connection.is_open:
            connection.close()


@pytest.mark.slow
@pytest.mark.parametrize("kill", ["connected", "leader"])
def test_a_killed_node_loses_no_task(cluster: RabbitCluster, kill: str, tmp_path: Path) -> None:
    leader_node, worker_node = 1, 0  # the producer declares on node 1; the worker uses node 0
    survivor = 2  # never killed: the test's own probes go there
    killed = worker_node if kill == "connected" else leader_node
    backend = create_broker(BrokerConfig(url=f"sqlite:///{tmp_path / 'results.sqlite3'}"))
    backend.migrate()
    options = {"queue_prefix": f"cl{kill}_", "priority_bands": [0]}
    env = FaultEnv(
        tmp_path,
        BrokerConfig(url=cluster.url(first=leader_node), result_backend=backend, transport_options=options),
        "rabbitmq",
        broker_connection_timeout=10.0,
        worker_dead_after=30.0,
    )
    probe_url = cluster.nodes[survivor].url  # pika reads "//" as an empty vhost
    try:
        with client(env) as proj:
            broker = proj.app.broker
            assert isinstance(broker, RabbitMQBroker)
            queue = broker.topology.band_queue(proj.app.conf.task_default_queue, 0)
            sent = [proj.record.delay(n, WORK_MS).id for n in range(TASKS)]
            members = cluster.members(queue)
            assert members == sorted(node.node for node in cluster.nodes), members
            assert cluster.leader(queue) == cluster.nodes[leader_node].node
            env.url = cluster.url(first=worker_node)  # the worker's $POTATOQ_BROKER_URL
            worker = env.worker("-c", str(CHILDREN), "-l", "info", conf={"beat_schedule": HOURLY})
            wait_for(env.executions, 60, "the first run")
            first_at = time.monotonic()
            producer = Producer(proj, every=0.01)  # goes on sending through the kill
            producer.start()
            wait_for(lambda: len(env.executions()) >= KILL_AT, 120, f"{KILL_AT} runs")
            token_before = token_held(probe_url, broker.topology.scheduler)
            held_before = worker.output().count(HOLDS)
            started_kill = time.monotonic()
            cluster.kill(killed)
            killed_at = time.monotonic()
            before_kill = len(env.executions())
            before_rate = before_kill / max(started_kill - first_at, 1e-3)
            resumed_at = wait_for(
                lambda: len(env.executions()) > before_kill + CHILDREN and time.monotonic(),
                60,
                "runs after the kill",
            )
            wait_for(
                lambda: any(at > killed_at for _, at in producer.sent),
                60,
                "a .delay() returning after the kill",
            )
            producer.stopping.set()
            producer.join(60)
            assert not producer.is_alive(), "the producer is stuck"
            sent += [task_id for task_id, _ in producer.sent]
            token_at = None
            if kill == "connected":
                # The token held on the killed node's channel may come back to the queue only
                # later (a spare, harmless): the worker's own word is what says it holds one.
                token_at = wait_for(
                    lambda: worker.output().count(HOLDS) > held_before and time.monotonic(),
                    60,
                    "the worker to hold the scheduler token again",
                )

            def missing() -> set[str]:
                return set(sent) - {task_id for task_id, _, _ in env.executions()}

            wait_for(lambda: not missing(), 120, "every sent task to run")
            new_leader = cluster.leader(queue)
            drained = time.monotonic()
            runs = env.executions()
            per_task = Counter(task_id for task_id, _, _ in runs)
            twice = {task_id: n for task_id, n in per_task.items() if n > 1}
            first_run: dict[str, int] = {}
            for index, (task_id, _, _) in enumerate(runs):
                first_run.setdefault(task_id, index)
            alive = worker.alive()
            children = {ppid for _, _, ppid in runs}
            log = worker.output()
            figures = {
                "killed": kill,
                "tasks_sent": len(sent),
                "sent_during_run": len(producer.sent),
                "delay_refused": len(producer.refused),
                "slowest_delay_seconds": round(producer.slowest, 2),
                "lost": len(missing()),
                "tasks_run_twice": len(twice),
                "extra_executions": sum(n - 1 for n in twice.values()),
                "kill_seconds": round(killed_at - started_kill, 2),
                "first_runs_after_kill_seconds": round(resumed_at - killed_at, 2),
                "token_held_again_seconds": None if token_at is None else round(token_at - killed_at, 2),
                "token_held_before": token_before,
                "before_kill_tasks_per_second": round(before_rate),
                "after_kill_tasks_per_second": round(
                    (len(runs) - before_kill) / max(drained - killed_at, 1e-3)
                ),
                "reconnects": log.count("lost ("),
                "new_leader_elected": new_leader != cluster.nodes[leader_node].node,
            }
            report("rabbitmq cluster node killed", "rabbitmq", **figures)
            dead = broker.list_dead(limit=100)
            worker.stop()
    finally:
        env.close(failed=True)
        backend.close()
        cluster.restart(killed)

    assert not producer.other, producer.other[:3]
    assert not missing(), f"{len(missing())} sent tasks never ran: {figures}"
    assert not dead, [(d.id, d.reason) for d in dead[:5]]
    assert alive, "the worker died"
    assert len(children) == 1, f"the worker was restarted: supervisors {children}"
    # With prefetch 1 each worker process holds at most one unacked delivery when the node
    # dies, so at most one task per process runs again. Which ones can't be told from the
    # order of recorded runs: a delivery the dying leader pushed just before the kill may
    # start after it, and its ack then goes nowhere (CI saw such a task).
    assert len(twice) <= CHILDREN, f"more tasks ran twice than were in flight: {figures}"
    if kill == "leader":
        assert new_leader != cluster.nodes[leader_node].node, "the killed node still leads the queue"
    if kill == "connected":
        assert "lost (" in log, "the worker's connection wasn't on the killed node"
        assert token_before, "the worker didn't hold the scheduler token before the kill"
