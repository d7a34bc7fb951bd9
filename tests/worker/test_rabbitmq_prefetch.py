"""RabbitMQ workers: ``worker_prefetch_multiplier`` (default 1) and ``-t N`` threads, on
real worker processes against RabbitMQ 4 (``POTATOQ_TEST_RABBITMQ_URL``).

What a process holds is read from outside, without the management plugin: a passive
declare's ``message_count`` counts only *ready* messages, so what workers hold unacked is
the total enqueued minus that count (and minus what finished). Everything waits on
markers and on that count; nothing is timed.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from tests import services
from tests.conftest import FACTORIES, FactoryContext
from tests.worker.conftest import Env, _client, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def rabbit_env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    """``broker_env`` for RabbitMQ only."""
    module = FACTORIES["rabbitmq"]
    services.require(module.SERVICE)
    ctx = FactoryContext(tmp_path=tmp_path, unique=f"w{uuid.uuid4().hex[:10]}", overrides={})
    config = module.make_config(ctx)
    environment = Env(tmp_path, config, "rabbitmq")
    try:
        yield environment
    finally:
        report = getattr(request.node, "rep_call", None)
        environment.close(bool(report is not None and report.failed))
        for fn in reversed(ctx.finalizers):
            fn()


@pytest.fixture
def rclient(rabbit_env: Env) -> Iterator[Any]:
    yield from _client(rabbit_env)


def holding(env: Env, multiplier: int, hold: float = 3600.0) -> dict[str, Any]:
    """Worker settings: ``multiplier``, and prefetched deliveries given back after ``hold`` s."""
    options = {**env.conf.get("broker_transport_options", {}), "prefetch_hold": hold}
    return {"worker_prefetch_multiplier": multiplier, "broker_transport_options": options}


def ready(client: Any, queue: str = "default") -> int:
    """Messages ready (not held by any consumer) in ``queue``'s lowest band."""
    broker = client.app.broker
    connection = pika.BlockingConnection(pika.URLParameters(broker.config.url))
    try:
        frame = connection.channel().queue_declare(broker.topology.queue_for(queue, 0), passive=True)
        return int(frame.method.message_count)
    finally:
        connection.close()


def test_prefetch_multiplier_4_holds_4_per_busy_child(rabbit_env: Env, rclient: Any) -> None:
    """-c 1 with worker_prefetch_multiplier=4: while the child runs one long task, it holds
    three more unacked; the rest stay ready for other workers."""
    long = rclient.block.delay("long", release="go")
    rest = [rclient.block.delay(f"p{i}", release="go") for i in range(7)]
    worker = rabbit_env.worker("-c", "1", conf=holding(rabbit_env, 4))
    rabbit_env.wait_marker("started-long")
    wait_for(lambda: ready(rclient) == 4, what="the busy child to hold 4 (4 of 8 left ready)")
    rabbit_env.mark("go")
    for result in [long, *rest]:
        result.get(timeout=30)
    assert worker.stop() == 0


def test_prefetch_1_is_the_default_a_busy_child_holds_only_its_task(rabbit_env: Env, rclient: Any) -> None:
    """Without the setting, a busy child holds the one task it runs: every other message
    can be taken by another worker."""
    long = rclient.block.delay("long", release="go")
    worker = rabbit_env.worker("-c", "1")
    rabbit_env.wait_marker("started-long")
    others = [rclient.add.delay(i, 1) for i in range(6)]
    wait_for(lambda: ready(rclient) == len(others), what="the other messages to be ready")
    # A second worker takes all of them while the first still runs its long task: the busy
    # one held none (with a larger prefetch it would hold some, and they'd wait for "go").
    second = rabbit_env.worker("-c", "1")
    assert [r.get(timeout=30) for r in others] == [i + 1 for i in range(6)]
    assert rabbit_env.marker("done-long") is None
    rabbit_env.mark("go")
    long.get(timeout=30)
    assert worker.stop() == 0 and second.stop() == 0


def test_threads_run_n_tasks_at_once(rabbit_env: Env, rclient: Any) -> None:
    """-P threads -c 3: three tasks run at the same time in one process (prefetch 3)."""
    worker = rabbit_env.worker("-P", "threads", "-c", "3")
    # Once a task has run, the process consumes: the next ones come as pushes (the very
    # first claims of a process take what is ready with basic.get).
    assert rclient.add.delay(1, 1).get(timeout=30) == 2
    running = [rclient.block.delay(f"t{i}", release="go") for i in range(3)]
    starts = [rabbit_env.wait_marker(f"started-t{i}") for i in range(3)]
    assert len({s["pid"] for s in starts}) == 1
    rabbit_env.mark("go")
    assert {r.get(timeout=30) for r in running} == {starts[0]["pid"]}
    assert worker.stop() == 0


def test_prefork_children_with_threads_run_all_slots(rabbit_env: Env, rclient: Any) -> None:
    """-c 2 -t 2: four tasks at once, two per child."""
    worker = rabbit_env.worker("-c", "2", "-t", "2")
    assert sorted(rclient.add.delay(i, 0).get(timeout=30) for i in range(2)) == [0, 1]
    running = [rclient.block.delay(f"t{i}", release="go") for i in range(4)]
    starts = [rabbit_env.wait_marker(f"started-t{i}") for i in range(4)]
    assert sorted(sum(s["pid"] == p for s in starts) for p in {s["pid"] for s in starts}) == [2, 2]
    rabbit_env.mark("go")
    for r in running:
        r.get(timeout=30)
    assert worker.stop() == 0


def test_a_crash_counts_a_delivery_against_every_prefetched_message(rabbit_env: Env, rclient: Any) -> None:
    """The trade-off of prefetch > 1: a child that dies returns what it held unrun as well,
    and RabbitMQ counts a delivery against each (``self.request.deliveries`` says 2 when they
    finally run)."""
    held = [rclient.block.delay(f"h{i}", release="go") for i in range(4)]
    worker = rabbit_env.worker("-c", "1", conf=holding(rabbit_env, 4))
    first = rabbit_env.wait_marker("started-h0")
    wait_for(lambda: ready(rclient) == 0, what="the child to hold all four")
    os.kill(first["pid"], signal.SIGKILL)  # the child dies; the supervisor starts another
    rabbit_env.mark("go")
    for result in held:
        result.get(timeout=30)
    deliveries = sorted(rabbit_env.marker(f"started-h{i}")["delivery"] for i in range(4))
    assert deliveries == [2, 2, 2, 2]
    assert worker.stop() == 0


def test_prefetched_messages_behind_a_long_task_go_to_an_idle_worker(rabbit_env: Env, rclient: Any) -> None:
    """Multiplier 4 and the default prefetch_hold (1 s): the three messages prefetched behind
    a long task are given back (uncounted) and run by another worker while it still runs."""
    long = rclient.block.delay("long", release="go")
    behind = [rclient.block.delay(f"b{i}", release=None, timeout=0) for i in range(3)]
    busy = rabbit_env.worker("-c", "1", conf={"worker_prefetch_multiplier": 4})
    rabbit_env.wait_marker("started-long")
    idle = rabbit_env.worker("-c", "1")
    for result in behind:
        result.get(timeout=30)
    assert rabbit_env.marker("done-long") is None
    starts = [rabbit_env.marker(f"started-b{i}") for i in range(3)]
    long_pid = rabbit_env.marker("started-long")["pid"]
    assert all(s["pid"] != long_pid for s in starts), "ran by the busy child"
    assert [s["delivery"] for s in starts] == [1, 1, 1], "given back without counting a delivery"
    rabbit_env.mark("go")
    long.get(timeout=30)
    assert busy.stop() == 0 and idle.stop() == 0


def test_a_busy_child_waits_for_its_push_without_an_empty_claim(rclient: Any) -> None:
    """With prefetch 1, a busy child's next task is pushed only once RabbitMQ has its ack,
    so ``settle_and_claim`` almost always comes back empty: the child then waits for the
    push and claims once, without an empty claim and a fresh read of the paused queues
    (a result-store round trip) before every task. Counted on the real broker, in process."""
    from potatoq.worker.child import ChildRunner
    from potatoq.worker.executor import Executor
    from potatoq.worker.options import WorkerOptions
    from potatoq.worker.running import RunningTable, TableReporter

    app = rclient.app
    tasks = 30
    results = [rclient.add.delay(i, 1) for i in range(tasks)]
    broker = app.broker
    calls = {"claim": 0, "paused_queues": 0}
    for name in calls:
        real = getattr(broker, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kwargs)

        setattr(broker, name, counted)  # the real broker, its calls counted
    try:
        options = WorkerOptions.from_app(app, concurrency=1, pool="solo")
        runner = ChildRunner(app, options, TableReporter(RunningTable(), os.getpid()), Executor(app))
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        assert [r.get(timeout=60) for r in results] == [i + 1 for i in range(tasks)]
        runner.request_stop()
        thread.join(30)
        assert not thread.is_alive()
    finally:
        for name in calls:
            delattr(broker, name)
    # Before: two claims and one fresh paused-set read per task (60 and 30 here).
    assert calls["claim"] < tasks * 1.5, calls
    assert calls["paused_queues"] < tasks // 2, calls
