"""Redis / Valkey paths that lost, stuck or misordered work before (issue 24): a sequence
counter past 2^40, the heartbeat records of dead nodes, a reaped chord header, a claim
whose reply was lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from potatoq.brokers.base import (
    ChordJoin,
    Complete,
    DeadLetter,
    Delivery,
    ResultRecord,
    WorkerInfo,
    WorkerRef,
)
from potatoq.brokers.limits import HEADER
from potatoq.brokers.redis import RedisBroker
from tests.brokers.redis.test_broker import claim_one, msg, raw_client

SEQ_LIMIT = 2**40


def test_priorities_stay_apart_when_the_sequence_counter_passes_2_to_the_40(broker: RedisBroker) -> None:
    """The ready score is -priority * 2^40 + seq: a seq of 2^40 or more would sort a
    priority-1 task behind an older priority-0 one. The counter is set just below the limit."""
    client = raw_client(broker)
    older = msg(priority=0)
    broker.enqueue([older])
    client.set(f"{broker.keys.prefix}seq", SEQ_LIMIT - 3)
    urgent = [msg(priority=1) for _ in range(6)]
    for message in urgent:  # one call each: the counter crosses the limit midway
        broker.enqueue([message])
    later = msg(priority=0)
    broker.enqueue([later])
    claimed = [claim_one(broker).id for _ in range(8)]
    assert claimed == [m.id for m in urgent] + [older.id, later.id]
    assert int(client.get(f"{broker.keys.prefix}seq") or 0) < SEQ_LIMIT


def test_renumbering_keeps_every_queue_in_order(broker: RedisBroker) -> None:
    client = raw_client(broker)
    first = [msg(queue="a", priority=p) for p in (0, 2, 0, 2)]
    second = [msg(queue="b") for _ in range(3)]
    broker.enqueue(first + second)
    client.zadd(broker.keys.ready("b"), {"ghost": 0})  # an entry whose hash is gone
    client.set(f"{broker.keys.prefix}seq", SEQ_LIMIT - 1)
    broker.enqueue([msg(queue="a", priority=2, id="a-last"), msg(queue="b", id="b-last")])
    assert [claim_one(broker, ["a"]).id for _ in range(5)] == [
        first[1].id,
        first[3].id,
        "a-last",
        first[0].id,
        first[2].id,
    ]
    assert [claim_one(broker, ["b"]).id for _ in range(4)] == [m.id for m in second] + ["b-last"]
    assert client.exists(broker.keys.job("ghost")) == 0  # renumbering dropped it, made no hash


def test_heartbeat_records_of_dead_nodes_are_forgotten_after_recovery(
    make: Callable[..., RedisBroker],
) -> None:
    """A node id is new on each run, so a dead node's record must go once its leases were
    reaped (two dead_after periods of silence), while a live node's stays."""
    broker = make(dead_after=0.2)
    dead, live = "dead-node", "live-node"

    def info(node: str) -> WorkerInfo:
        return WorkerInfo(node, "host", 1, ("default",), 1, time.time())

    broker.heartbeat(info(dead))
    deadline = time.monotonic() + 30
    while dead in {w.node for w in broker.workers()}:
        assert time.monotonic() < deadline, "the dead node's heartbeat record was never forgotten"
        broker.heartbeat(info(live))
        broker.recover(0.2, 5)
        time.sleep(0.05)
    assert live in {w.node for w in broker.workers()}


def _expire_at_the_limit(broker: RedisBroker, max_deliveries: int) -> Delivery:
    """Claim the one waiting task ``max_deliveries`` times, letting each lease run out
    (a node that keeps dying); return the last delivery, its lease expired."""
    for n in range(1, max_deliveries + 1):
        delivery = claim_one(broker)
        assert delivery.deliveries == n
        expired = time.monotonic() + 30
        if n < max_deliveries:
            while broker.recover(broker.config.dead_after, max_deliveries).requeued == 0:
                assert time.monotonic() < expired, "the lease never ran out"
                time.sleep(0.02)
    time.sleep(broker.config.dead_after * 2)  # the last lease runs out too
    return delivery


def test_reap_at_the_delivery_limit_settles_with_the_workers_failure_outcome(
    make: Callable[..., RedisBroker],
) -> None:
    """A task whose node died on each delivery fails as a failure settle does: the hook's
    outcome joins its chord (the callback is enqueued) and enqueues its errback."""
    broker = make(dead_after=0.1)
    header, callback, errback = msg(), msg(queue="callbacks"), msg(queue="errbacks")
    broker.enqueue([header])
    seen: list[tuple[str, str]] = []

    def lost_outcome(delivery: Delivery, exc: BaseException) -> DeadLetter:
        seen.append((delivery.id, type(exc).__name__))
        join = ChordJoin(group_id="g-reaped", index=0, size=1, value=b'{"ok": false}', callback=callback)
        record = ResultRecord(task_id=delivery.id, state="FAILURE", result={"exc_type": "WorkerLostError"})
        return DeadLetter(reason=f"{exc}", result=record, followups=(errback,), chord=join)

    broker.lost_outcome = lost_outcome
    _expire_at_the_limit(broker, 2)
    deadline = time.monotonic() + 30
    while broker.recover(0.1, 2).dead == 0:
        assert time.monotonic() < deadline, "the task at its limit was never reaped"
        time.sleep(0.02)
    assert seen == [(header.id, "WorkerLostError")]
    assert claim_one(broker, ["callbacks"]).id == callback.id  # the chord fired
    assert claim_one(broker, ["errbacks"]).id == errback.id
    assert [letter.id for letter in broker.list_dead()] == [header.id]
    result = broker.get_result(header.id)
    assert result is not None and result.state == "FAILURE"
    assert {s.queue: s.running for s in broker.queue_stats()}["default"] == 0


def test_a_reaped_task_whose_settle_never_came_is_handed_off_again(make: Callable[..., RedisBroker]) -> None:
    """The reaper leases the task to itself before it settles it: a reaper that dies in
    between (here: a hook that raises BaseException) leaves it to the next reap."""
    broker = make(dead_after=0.1)
    task = msg()
    broker.enqueue([task])
    calls: list[str] = []

    class ReaperDied(BaseException):
        pass

    def dies(delivery: Delivery, exc: BaseException) -> DeadLetter:
        calls.append(delivery.id)
        if len(calls) == 1:
            raise ReaperDied
        return DeadLetter(reason=str(exc))

    broker.lost_outcome = dies
    _expire_at_the_limit(broker, 1)
    with pytest.raises(ReaperDied):
        broker.recover(0.1, 1)
    deadline = time.monotonic() + 30
    while broker.recover(0.1, 1).dead == 0:  # once the reaper's own lease ran out
        assert time.monotonic() < deadline, "the handed-off task was never handed off again"
        time.sleep(0.02)
    assert calls == [task.id, task.id]
    assert [letter.id for letter in broker.list_dead()] == [task.id]


def test_a_handed_off_task_keeps_its_concurrency_slot_until_it_is_settled(
    make: Callable[..., RedisBroker],
) -> None:
    """The reap hands a task at its delivery limit to the reaper still running: its slot of a
    concurrency limit stays taken (another task of the key waits) until that settle, which
    gives it back exactly once."""
    broker = make(dead_after=0.1)
    first, second = msg(headers={HEADER: ["reaped-key", 1]}), msg(headers={HEADER: ["reaped-key", 1]})
    broker.enqueue([first])

    class ReaperDied(BaseException):
        pass

    calls: list[str] = []

    def dies_once(delivery: Delivery, exc: BaseException) -> DeadLetter:
        calls.append(delivery.id)
        if len(calls) == 1:
            raise ReaperDied
        return DeadLetter(reason=str(exc))

    broker.lost_outcome = dies_once
    _expire_at_the_limit(broker, 1)
    broker.enqueue([second])
    with pytest.raises(ReaperDied):
        broker.recover(0.1, 1)  # handed off, never settled: the reaper "died"
    assert broker.claim(["default"], WorkerRef("n", 1)) is None  # the slot is still taken
    assert [(u.key, u.running, u.waiting) for u in broker.limits()] == [("reaped-key", 1, 1)]
    deadline = time.monotonic() + 30
    while broker.recover(0.1, 1).dead == 0:  # the reaper's own lease ran out: settled now
        assert time.monotonic() < deadline, "the handed-off task was never handed off again"
        time.sleep(0.02)
    assert claim_one(broker).id == second.id  # the settle gave the slot back
    assert broker.claim(["default"], WorkerRef("n", 1)) is None
    assert [(u.key, u.running, u.waiting) for u in broker.limits()] == [("reaped-key", 1, 0)]


def test_worker_recovery_joins_the_chord_of_a_reaped_header(make: Callable[..., RedisBroker]) -> None:
    """End to end through the worker's chores and executor: a chord whose header task's
    node died on every delivery still runs its callback's failure path instead of hanging."""
    from potatoq import Potatoq, chord
    from potatoq.worker.chores import Chores
    from potatoq.worker.executor import Executor
    from potatoq.worker.options import WorkerOptions

    probe = make(dead_after=0.1)
    app = Potatoq(
        "reaped",
        broker=probe.config.url,
        result_backend="broker",
        broker_transport_options=dict(probe.config.transport_options),
        worker_dead_after=0.1,
        set_as_current=False,
    )

    @app.task(name="reaped.part")
    def part(x: int) -> int:
        return x

    @app.task(name="reaped.total")
    def total(values: list[int]) -> int:
        return sum(values)

    @app.task(name="reaped.on_error")
    def on_error(task_id: str) -> str:
        return task_id

    broker = app.broker
    assert isinstance(broker, RedisBroker)
    body = total.s().on_error(on_error.s())
    outcome = chord([part.s(1), part.s(2)])(body)
    first = claim_one(broker)
    assert broker.settle(first, Executor(app).execute(first))  # one part finishes
    options = WorkerOptions.from_app(app, concurrency=1, beat=False)
    chores = Chores(app, options, list)
    _expire_at_the_limit(broker, options.max_deliveries)  # the other's node keeps dying
    deadline = time.monotonic() + 30
    while (callback := broker.claim(["default"], WorkerRef("n", 1))) is None:
        assert time.monotonic() < deadline, "the chord never fired: its reaped part didn't join"
        chores._recover()
        time.sleep(0.02)
    assert callback.message is not None and callback.message.task == "reaped.total"
    assert broker.settle(callback, Executor(app).execute(callback))
    assert broker.get_result(outcome.id) is not None
    assert broker.get_result(outcome.id).state == "FAILURE"  # type: ignore[union-attr]
    app.close()


def test_one_idle_waiter_wakes_for_a_due_task(broker: RedisBroker) -> None:
    """Idle threads each claim, then wait (as a worker's slots do). When the delayed task
    becomes due, only the thread timing it wakes; the others stay blocked."""
    client = raw_client(broker)
    eta = time.time() + 3.0
    task = msg(eta=eta)
    broker.enqueue([task])
    client.delete(broker.keys.marker("default"))  # the enqueue's wake-up: not what is counted
    stop = threading.Event()
    claimed: list[str] = []
    woke: set[int] = set()  # threads whose wait() returned at or after the due time

    def slot(index: int) -> None:
        while not stop.is_set():
            delivery = broker.claim(["default"], WorkerRef("waiter", index))
            if delivery is not None:
                claimed.append(delivery.id)
                assert broker.settle(delivery, Complete())
                continue
            broker.wait(["default"], 30.0)
            if not stop.is_set() and time.time() >= eta - 0.5:
                woke.add(index)

    threads = [threading.Thread(target=slot, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while not claimed:
        assert time.monotonic() < deadline, "the delayed task was never claimed"
        time.sleep(0.05)
    time.sleep(2.0)  # the others would wake within this if they were bound by the due time too
    seen = set(woke)
    stop.set()
    broker.interrupt()
    for thread in threads:
        thread.join(60)
    assert claimed == [task.id]
    assert len(seen) == 1, f"{len(seen)} waiters woke for one due task"
