"""The broker contract suite: every test runs once per broker in ``tests/factories``.

Tests are named by behaviour and skip by :class:`Capabilities` flag, never by broker name.
Nothing here asserts how fast something happened: waits are bounded by generous deadlines
(a broker that needs them fails with a clear message instead of hanging), and the only
sleeps are the ones an eta or an expiry demands, inside polling loops with a deadline.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence

import pytest

from potatoq import serialization
from potatoq.brokers.base import (
    Broker,
    ChordJoin,
    Complete,
    DeadLetter,
    Delivery,
    Requeue,
    ResultRecord,
    RetryLater,
    WorkerInfo,
    WorkerRef,
)
from potatoq.exceptions import InvalidName
from potatoq.message import Message
from potatoq.states import FAILURE, STARTED, SUCCESS

from .conftest import BrokerMaker

WORKER_A = WorkerRef("node-a", 101)
WORKER_B = WorkerRef("node-b", 202)
DEADLINE = 15.0  # generous upper bound for anything that should happen "soon"


# ----------------------------------------------------------------------------- helpers


def msg(queue: str = "default", *, priority: int = 0, eta: float | None = None, **kw: object) -> Message:
    task_id = str(kw.pop("id", None) or uuid.uuid4())
    return Message(id=task_id, task="tests.noop", queue=queue, priority=priority, eta=eta, **kw)  # type: ignore[arg-type]


def claim_soon(
    broker: Broker, queues: Sequence[str], worker: WorkerRef = WORKER_A, timeout: float = DEADLINE
) -> Delivery:
    """Claim, waiting on the broker's wake-up, until a task comes or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        delivery = broker.claim(queues, worker)
        if delivery is not None:
            return delivery
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"nothing claimable from {list(queues)} within {timeout} s")
        broker.wait(queues, min(remaining, 0.5))


def claim_n(broker: Broker, queues: Sequence[str], n: int, worker: WorkerRef = WORKER_A) -> list[Delivery]:
    return [claim_soon(broker, queues, worker) for _ in range(n)]


def assert_nothing_claimable(broker: Broker, queues: Sequence[str], worker: WorkerRef = WORKER_A) -> None:
    """Nothing ready now (after one short wait, for brokers that deliver asynchronously)."""
    broker.wait(queues, 0.2)
    delivery = broker.claim(queues, worker)
    assert delivery is None, f"unexpected task {delivery.id} in {list(queues)}"


def poll(check: Callable[[], object], what: str, timeout: float = DEADLINE, every: float = 0.05) -> object:
    """Call ``check`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def needs_results(broker: Broker) -> None:
    if not broker.capabilities.stores_results and broker.config.result_backend is None:
        pytest.skip("broker keeps no results and no result backend is configured")


def needs(broker: Broker, capability: str) -> None:
    """Skip unless ``broker.capabilities.<capability>`` is true."""
    if not getattr(broker.capabilities, capability):
        pytest.skip(f"capabilities.{capability} is False on this broker")


def needs_processes(broker: Broker) -> None:
    if not broker.capabilities.multiprocess:
        pytest.skip("broker is private to one process")


def result(task_id: str, value: object = None, state: str = SUCCESS) -> ResultRecord:
    return ResultRecord(task_id=task_id, state=state, result=value, date_done=time.time())


def stats_of(broker: Broker, queue: str) -> tuple[int, int, int]:
    for row in broker.queue_stats():
        if row.queue == queue:
            return row.waiting, row.delayed, row.running
    return 0, 0, 0


def make_dead(broker: Broker, queue: str = "default", reason: str = "boom") -> Delivery:
    broker.enqueue([msg(queue)])
    delivery = claim_soon(broker, [queue])
    assert broker.settle(delivery, DeadLetter(reason=reason))
    return delivery


def recover_until(broker: Broker, dead_after: float, max_deliveries: int, want: str = "requeued") -> None:
    """Run recover() until it reports a task ``requeued`` (or ``dead``): holders age past dead_after."""
    poll(
        lambda: getattr(broker.recover(dead_after, max_deliveries), want),
        f"recover() to report a {want} task",
    )


def fork_children(count: int, body: Callable[[int], int]) -> list[int]:
    """Fork ``count`` children that start together and run ``body(i)``; their exit codes."""
    gate_r, gate_w = os.pipe()
    pids = []
    for i in range(count):
        pid = os.fork()
        if pid == 0:  # child: never return into pytest
            code = 99
            try:
                os.close(gate_w)
                os.read(gate_r, 1)  # blocks until the parent closes the gate
                code = body(i)
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        pids.append(pid)
    os.close(gate_r)
    os.close(gate_w)  # every child reads EOF at once
    codes = []
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    return codes


# ----------------------------------------------------------------------------- ordering


def test_fifo_within_a_priority(broker: Broker) -> None:
    sent = [msg("default") for _ in range(5)]
    for message in sent:  # one call each: order of arrival, not order inside a batch
        broker.enqueue([message])
    got = [d.id for d in claim_n(broker, ["default"], 5)]
    assert got == [m.id for m in sent]


def test_a_task_due_later_queues_behind_tasks_ready_before_it(broker: Broker) -> None:
    """FIFO order is the order tasks become ready: a task that waited for its eta goes behind
    the tasks that were ready when it fell due, though it was sent before them."""
    eta = time.time() + 0.5
    scheduled, ready = msg(eta=eta), msg()
    broker.enqueue([scheduled])
    broker.enqueue([ready])
    time.sleep(max(0.0, eta - time.time()))  # the eta itself: nothing to wait on but the clock
    got = [d.id for d in claim_n(broker, ["default"], 2)]
    assert got == [ready.id, scheduled.id]


def test_a_retried_task_queues_behind_tasks_ready_before_it(broker: Broker) -> None:
    """A retry is a new attempt: it goes to the back of its priority, not back to its old place."""
    retried, waiting = msg(), msg()
    broker.enqueue([retried])
    first = claim_soon(broker, ["default"])
    broker.enqueue([waiting])
    assert broker.settle(first, RetryLater(message=retried.replace(retries=1)))
    got = [d.id for d in claim_n(broker, ["default"], 2)]
    assert got == [waiting.id, retried.id]


def test_higher_priority_first(broker: Broker) -> None:
    low = [msg(priority=0) for _ in range(2)]
    high = [msg(priority=9) for _ in range(2)]
    broker.enqueue([low[0], high[0], low[1], high[1]])
    got = [d.id for d in claim_n(broker, ["default"], 4)]
    assert got == [high[0].id, high[1].id, low[0].id, low[1].id]


def test_any_priority_orders_exactly(broker: Broker) -> None:
    if not broker.capabilities.exact_priorities:
        pytest.skip("priorities are banded on this broker")
    sent = [msg(priority=p) for p in (3, -2, 100, 4, 0)]
    broker.enqueue(sent)
    got = [d.message.priority for d in claim_n(broker, ["default"], 5) if d.message]
    assert got == [100, 4, 3, 0, -2]


def test_queues_are_tried_in_the_order_given(broker: Broker) -> None:
    first, second = msg("alpha", priority=0), msg("beta", priority=0)
    broker.enqueue([first, second])
    assert claim_soon(broker, ["beta", "alpha"]).id == second.id
    assert claim_soon(broker, ["beta", "alpha"]).id == first.id


def test_claim_reports_queue_message_and_first_delivery(broker: Broker) -> None:
    sent = msg("default", args=(1, "two"), kwargs={"k": [3]})
    broker.enqueue([sent])
    delivery = claim_soon(broker, ["default"], WORKER_B)
    assert (delivery.id, delivery.queue, delivery.deliveries, delivery.worker) == (
        sent.id,
        "default",
        1,
        WORKER_B,
    )
    assert delivery.message == sent
    assert delivery.error is None
    assert delivery.token


def test_enqueue_batch_of_1000_then_claim_all(broker: Broker) -> None:
    sent = [msg("bulk") for _ in range(1000)]
    broker.enqueue(sent)
    got = [d.id for d in claim_n(broker, ["bulk"], 1000)]
    assert got == [m.id for m in sent]
    assert_nothing_claimable(broker, ["bulk"])


def test_duplicate_id_enqueue_is_a_noop(broker: Broker) -> None:
    needs(broker, "unique_ids")
    first = msg()
    broker.enqueue([first])
    broker.enqueue([first.replace(args=("waiting duplicate",))])
    delivery = claim_soon(broker, ["default"])
    assert delivery.message == first
    broker.enqueue([first.replace(args=("running duplicate",))])
    assert_nothing_claimable(broker, ["default"])
    assert broker.settle(delivery, Complete())
    assert_nothing_claimable(broker, ["default"])


def test_invalid_queue_name_is_refused_naming_it(broker: Broker) -> None:
    for bad in ("has space", "semi;colon", "", "x" * 201, "quote'"):
        with pytest.raises(InvalidName) as info:
            broker.enqueue([msg(bad)])
        if bad and len(bad) <= 80:
            assert bad in str(info.value)


# ----------------------------------------------------------------------------- delays and wake-ups


def test_delayed_task_is_claimed_once_due_not_before(broker: Broker) -> None:
    eta = time.time() + 0.4
    delayed = msg(eta=eta)
    broker.enqueue([delayed])
    started = time.monotonic()
    broker.wait(["default"], 30)  # must wake by itself once the task is due
    assert time.monotonic() - started < 25, "wait() slept through a due task"
    delivery = claim_soon(broker, ["default"])
    claimed_at = time.time()
    assert delivery.id == delayed.id
    assert claimed_at >= eta, f"claimed {eta - claimed_at:.4f} s before its eta"
    assert_nothing_claimable(broker, ["default"])


def test_due_task_goes_before_a_later_one(broker: Broker) -> None:
    later = msg(eta=time.time() + 3600)
    soon = msg(eta=time.time() + 0.2)
    broker.enqueue([later, soon])
    assert claim_soon(broker, ["default"]).id == soon.id
    assert_nothing_claimable(broker, ["default"])
    if broker.capabilities.full_stats:
        assert stats_of(broker, "default")[1] == 1


def test_wait_returns_when_another_thread_enqueues(broker: Broker) -> None:
    waiting = threading.Event()
    sent = msg("wakeup")

    def producer() -> None:
        waiting.wait(DEADLINE)
        time.sleep(0.05)  # let the main thread block inside wait()
        broker.enqueue([sent])

    thread = threading.Thread(target=producer)
    thread.start()
    try:
        waiting.set()
        started = time.monotonic()
        broker.wait(["wakeup"], 60)
        assert time.monotonic() - started < 45, "wait() missed the enqueue"
        assert claim_soon(broker, ["wakeup"]).id == sent.id
    finally:
        thread.join(DEADLINE)


def test_wait_returns_at_once_when_work_is_already_ready(make_broker: BrokerMaker) -> None:
    producer, waiter = make_broker(), make_broker()  # e.g. the app and a worker
    sent = msg("ready")
    producer.enqueue([sent])
    started = time.monotonic()
    waiter.wait(["ready"], 30)  # no claim came first: wait itself must see the ready task
    assert time.monotonic() - started < 25, "wait() blocked although a task was ready"
    assert claim_soon(waiter, ["ready"]).id == sent.id


def test_wait_returns_when_another_broker_instance_enqueues(make_broker: BrokerMaker) -> None:
    producer, waiter = make_broker(), make_broker()
    assert waiter.claim(["wakeup"], WORKER_A) is None
    waiting = threading.Event()
    sent = msg("wakeup")

    def produce() -> None:
        waiting.wait(DEADLINE)
        producer.enqueue([sent])  # may land before or after the waiter blocks: both must work

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        waiting.set()
        started = time.monotonic()
        waiter.wait(["wakeup"], 60)
        assert time.monotonic() - started < 45, "wait() missed another instance's enqueue"
        assert claim_soon(waiter, ["wakeup"]).id == sent.id
    finally:
        thread.join(DEADLINE)


DUE_WAKE_BOUND = 10.0  # seconds past the due time: far under every broker's slowest fallback


@pytest.mark.parametrize("scheduled", ["before the wait", "during the wait", "as a retry"])
def test_an_idle_waiting_claimer_wakes_when_a_scheduled_task_falls_due(
    make_broker: BrokerMaker, scheduled: str
) -> None:
    """A task due in 1 s reaches a claimer blocked in one long wait() within
    DUE_WAKE_BOUND of its due time. The factory's SLOW_FALLBACK_OPTIONS push every
    periodic fallback (PostgreSQL's timed promotion) to a minute and the wait asks for two,
    so the bound is met only if the wait itself ends at the due time: an event, not a speed.
    """
    options = {
        **make_broker.config().transport_options,
        **getattr(make_broker.module, "SLOW_FALLBACK_OPTIONS", {}),
    }
    consumer = make_broker(transport_options=options)
    producer = make_broker(transport_options=options)
    queue = "due-wake"
    producer.enqueue([msg(queue)])
    first = claim_soon(consumer, [queue])  # warm up: schema, first timed promotion, LISTEN
    assert consumer.settle(first, Complete())
    task = msg(queue)
    if scheduled == "before the wait":
        eta = time.time() + 1.0
        producer.enqueue([task.replace(eta=eta)])
    claimed: list[Delivery] = []
    done = threading.Event()
    waiting = threading.Event()
    stop = threading.Event()

    def claimer() -> None:
        while not stop.is_set():
            delivery = consumer.claim([queue], WORKER_A)
            if delivery is not None:
                claimed.append(delivery)
                done.set()
                return
            waiting.set()
            consumer.wait([queue], 120.0)  # ends early only on a wake-up

    if scheduled == "as a retry":
        producer.enqueue([task])
        held = claim_soon(consumer, [queue])
        eta = time.time() + 1.0
        assert consumer.settle(held, RetryLater(message=task.replace(retries=1, eta=eta)))
    thread = threading.Thread(target=claimer, daemon=True)
    thread.start()
    if scheduled == "during the wait":
        assert waiting.wait(DEADLINE), "the claimer never got to its wait"
        eta = time.time() + 1.0
        producer.enqueue([task.replace(eta=eta)])
    try:
        assert done.wait(max(0.0, eta + DUE_WAKE_BOUND - time.time())), (
            f"a task due in 1 s ({scheduled}) wasn't claimed within {DUE_WAKE_BOUND} s of its due time: "
            "the idle claimer's wait didn't wake for it"
        )
        assert claimed[0].id == task.id
        assert time.time() >= eta  # never early
    finally:
        stop.set()
        consumer.interrupt()
        thread.join(timeout=DEADLINE)


# ----------------------------------------------------------------------------- fencing and settle


def test_stale_delivery_cannot_settle(make_broker: BrokerMaker) -> None:
    broker = make_broker(dead_after=0.2)
    needs_results(broker)
    needs(broker, "recovers_dead_holders")
    sent = msg()
    broker.enqueue([sent])
    stale = claim_soon(broker, ["default"], WORKER_A)
    recover_until(broker, dead_after=0.2, max_deliveries=5)
    fresh = claim_soon(broker, ["default"], WORKER_B)
    assert fresh.id == sent.id
    assert fresh.deliveries == 2
    assert fresh.token != stale.token

    assert broker.settle(stale, Complete(result=result(sent.id, "stale"))) is False
    assert broker.settle(stale, DeadLetter(reason="stale")) is False
    assert broker.settle(stale, Requeue(crashed=True)) is False
    assert broker.settle(stale, RetryLater(message=sent.replace(retries=1))) is False
    assert broker.get_result(sent.id) is None
    assert broker.list_dead() == []
    assert stats_of(broker, "default")[2] == 1

    assert broker.settle(fresh, Complete(result=result(sent.id, "fresh"))) is True
    record = broker.get_result(sent.id)
    assert record is not None and record.result == "fresh"
    assert broker.settle(fresh, Complete()) is False  # settled already


def test_settle_writes_result_and_followups(broker: Broker) -> None:
    needs_results(broker)
    sent = msg("work")
    follow = (msg("next"), msg("next"))
    broker.enqueue([sent])
    delivery = claim_soon(broker, ["work"])
    assert broker.settle(delivery, Complete(result=result(sent.id, 42), followups=follow))
    record = broker.get_result(sent.id)
    assert record is not None and (record.state, record.result) == (SUCCESS, 42)
    assert {d.id for d in claim_n(broker, ["next"], 2)} == {m.id for m in follow}
    assert_nothing_claimable(broker, ["work", "next"])


def test_settle_and_claim_hands_over_the_next_task(broker: Broker) -> None:
    first, second = msg(), msg()
    broker.enqueue([first, second])
    delivery = claim_soon(broker, ["default"])
    settled, following = broker.settle_and_claim(delivery, Complete(), ["default"], WORKER_A)
    assert settled
    following = following or claim_soon(broker, ["default"])
    assert following.id == second.id


def test_settle_is_atomic_when_the_settler_is_killed(make_broker: BrokerMaker) -> None:
    """SIGKILL a settling process at random moments: no task is ever half settled."""
    broker = make_broker(dead_after=0.3)
    needs_processes(broker)
    needs_results(broker)
    needs(broker, "atomic_settle")
    tasks: list[Message] = []
    batch, killed_mid_run, rng = 500, 0, random.Random()

    def settle_forever(worker: WorkerRef, started_w: int) -> int:
        signalled = False
        while True:
            delivery = broker.claim(["atomic"], worker)
            if delivery is None:
                return 0
            followups = (msg("atomic-next", id=f"{delivery.id}-a"), msg("atomic-next", id=f"{delivery.id}-b"))
            broker.settle(delivery, Complete(result=result(delivery.id, "done"), followups=followups))
            if not signalled:
                os.write(started_w, b"x")  # the parent starts its random countdown now
                signalled = True

    for round_no in range(4):
        new_tasks = [msg("atomic") for _ in range(batch)]
        broker.enqueue(new_tasks)
        tasks += new_tasks
        started_r, started_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 99
            try:
                os.close(started_r)
                code = settle_forever(WorkerRef(f"killed-{round_no}", os.getpid()), started_w)
            finally:
                os._exit(code)
        os.close(started_w)
        assert os.read(started_r, 1) == b"x", "the settling child died before settling anything"
        os.close(started_r)
        time.sleep(rng.uniform(0.0, 0.2))
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished:  # it drained the queue before the kill: give the next round more work
            batch *= 4
            continue
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        killed_mid_run += 1
    assert killed_mid_run, "every child finished before it could be killed"

    done = {t.id for t in tasks if broker.get_result(t.id) is not None}
    assert done, "no task was settled"
    # Every task without a result must still be there: requeue the killed holders' claims.
    poll(
        lambda: broker.recover(0.3, 100) and stats_of(broker, "atomic")[2] == 0,
        "the killed children's tasks to be requeued",
    )
    left = {d.id for d in claim_n(broker, ["atomic"], len(tasks) - len(done))}
    assert left == {t.id for t in tasks} - done, "a task vanished without its result"
    assert_nothing_claimable(broker, ["atomic"])
    assert stats_of(broker, "atomic-next")[0] == 2 * len(done), "results and follow-ups disagree"
    followup_ids = {d.id for d in claim_n(broker, ["atomic-next"], 2 * len(done))}
    assert followup_ids == {f"{t}-{s}" for t in done for s in "ab"}
    assert_nothing_claimable(broker, ["atomic-next"])


def test_threads_claiming_at_once_get_distinct_tasks(broker: Broker) -> None:
    sent = [msg("threads") for _ in range(200)]
    broker.enqueue(sent)
    got: list[str] = []
    lock = threading.Lock()

    def drain(n: int) -> None:
        worker = WorkerRef("threads", n)
        while True:
            delivery = broker.claim(["threads"], worker)
            if delivery is None:
                return
            assert broker.settle(delivery, Complete())
            with lock:
                got.append(delivery.id)

    threads = [threading.Thread(target=drain, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    got += [d.id for d in claim_n(broker, ["threads"], len(sent) - len(got))]  # async stragglers
    assert sorted(got) == sorted(m.id for m in sent)


def test_a_delivery_sent_as_json_can_be_settled_by_the_supervisor(broker: Broker) -> None:
    if not broker.capabilities.supervisor_settles:
        pytest.skip("only the claiming process can settle on this broker")
    sent = msg()
    broker.enqueue([sent])
    delivery = claim_soon(broker, ["default"])
    wire = serialization.dumps(delivery.to_json(), where="delivery")
    received = Delivery.from_json(serialization.loads(wire))
    assert (received.id, received.raw, received.token, received.message) == (
        delivery.id,
        delivery.raw,
        delivery.token,
        sent,
    )
    assert broker.settle(received, Requeue(crashed=True))
    assert claim_soon(broker, ["default"]).deliveries == 2


# ----------------------------------------------------------------------------- crashes and recovery


def test_graceful_requeue_does_not_count_a_delivery(broker: Broker) -> None:
    broker.enqueue([msg()])
    first = claim_soon(broker, ["default"])
    assert broker.settle(first, Requeue(crashed=False))
    again = claim_soon(broker, ["default"])
    assert (again.id, again.deliveries) == (first.id, 1)
    assert broker.settle(first, Complete()) is False  # the old token is gone


def test_crashed_requeue_counts_a_delivery(broker: Broker) -> None:
    broker.enqueue([msg()])
    first = claim_soon(broker, ["default"])
    assert broker.settle(first, Requeue(crashed=True))
    again = claim_soon(broker, ["default"])
    assert (again.id, again.deliveries) == (first.id, 2)


def test_crashes_reach_max_deliveries_then_dead_letter_as_worker_lost(make_broker: BrokerMaker) -> None:
    broker = make_broker(dead_after=0.2)
    needs(broker, "recovers_dead_holders")
    sent = msg()
    broker.enqueue([sent])
    first = claim_soon(broker, ["default"])
    assert broker.settle(first, Requeue(crashed=True))  # the supervisor saw the child die
    second = claim_soon(broker, ["default"])
    assert second.deliveries == 2
    recover_until(broker, dead_after=0.2, max_deliveries=3)  # the whole node died
    third = claim_soon(broker, ["default"])
    assert third.deliveries == 3
    recover_until(broker, dead_after=0.2, max_deliveries=3, want="dead")

    assert_nothing_claimable(broker, ["default"])
    [dead] = broker.list_dead()
    assert dead.id == sent.id
    assert dead.reason.startswith("WorkerLostError")
    assert dead.raw == third.raw
    assert dead.task == "tests.noop"
    if broker.capabilities.stores_results or broker.config.result_backend is not None:
        record = broker.get_result(sent.id)
        assert record is not None and record.state == FAILURE
        assert isinstance(record.result, dict)
        assert record.result["exc_type"] == "WorkerLostError"
        assert record.result["exc_module"] == "potatoq.exceptions"
        assert record.result["exc_message"]
    assert broker.settle(third, Complete()) is False


def test_recover_requeues_a_dead_workers_tasks_and_leaves_a_live_ones(make_broker: BrokerMaker) -> None:
    broker = make_broker(dead_after=1.0)
    needs(broker, "recovers_dead_holders")
    dead_task, live_task = msg(), msg()
    broker.enqueue([dead_task])
    of_dead = claim_soon(broker, ["default"], WORKER_A)
    broker.enqueue([live_task])
    of_live = claim_soon(broker, ["default"], WORKER_B)
    started = time.time()
    for worker in (WORKER_A, WORKER_B):
        broker.heartbeat(WorkerInfo(worker.node, "host", worker.pid, ("default",), 1, started))

    def recover_keeping_b_alive() -> int:
        broker.heartbeat(WorkerInfo(WORKER_B.node, "host", WORKER_B.pid, ("default",), 1, started))
        broker.extend([of_live], 1.0)
        report = broker.recover(1.0, 5)
        assert report.dead == 0
        return report.requeued

    assert poll(recover_keeping_b_alive, "the dead worker's task to be requeued") == 1
    again = claim_soon(broker, ["default"], WORKER_B)
    assert again.id == dead_task.id and again.deliveries == 2
    assert broker.settle(of_live, Complete()), "the live worker lost its task"
    assert broker.settle(of_dead, Complete()) is False


def test_orphaned_lists_a_nodes_claims_held_by_none_of_the_given_pids(broker: Broker) -> None:
    if broker.capabilities.leases or not broker.capabilities.lists_holders:
        pytest.skip("such a claim's lease runs out, or its channel closes: the broker frees it itself")
    live, dead, elsewhere = WORKER_A, WorkerRef(WORKER_A.node, 999), WORKER_B
    broker.enqueue([msg(), msg(), msg(), msg()])
    of_live = claim_soon(broker, ["default"], live)
    first = claim_soon(broker, ["default"], dead)
    second = claim_soon(broker, ["default"], dead)
    claim_soon(broker, ["default"], elsewhere)
    found = broker.orphaned(live.node, [live.pid])
    assert [(d.id, d.token, d.worker) for d in found] == [
        (first.id, first.token, dead),
        (second.id, second.token, dead),
    ]
    assert found[0].message == first.message and found[0].deliveries == 1
    assert broker.orphaned(live.node, [live.pid, dead.pid]) == []
    assert [d.id for d in broker.orphaned(live.node, [])] == [of_live.id, first.id, second.id]
    assert broker.settle(found[0], Requeue(crashed=True))  # settled like a dead child's delivery
    assert [d.id for d in broker.orphaned(live.node, [live.pid])] == [second.id]


def test_retry_later_makes_the_same_id_due_later(broker: Broker) -> None:
    sent = msg(args=(7,))
    broker.enqueue([sent])
    first = claim_soon(broker, ["default"])
    eta = time.time() + 0.4
    retry = sent.replace(retries=1, eta=eta)
    assert broker.settle(first, RetryLater(message=retry))
    delivery = claim_soon(broker, ["default"])
    claimed_at = time.time()
    assert claimed_at >= eta, f"claimed {eta - claimed_at:.4f} s before its eta"
    assert delivery.id == sent.id
    assert delivery.message is not None and delivery.message.retries == 1
    assert delivery.deliveries == 1  # the count starts again for the new attempt
    assert broker.settle(first, Complete()) is False


def test_retry_later_stores_its_result(broker: Broker) -> None:
    needs_results(broker)
    sent = msg()
    broker.enqueue([sent])
    first = claim_soon(broker, ["default"])
    retry = sent.replace(retries=1, eta=time.time() + 3600)
    assert broker.settle(first, RetryLater(message=retry, result=result(sent.id, None, "RETRY")))
    record = broker.get_result(sent.id)
    assert record is not None and record.state == "RETRY"
    if broker.capabilities.full_stats:
        assert stats_of(broker, "default")[1] == 1


# ----------------------------------------------------------------------------- chords and periodic


def test_chord_join_counts_each_index_once(broker: Broker) -> None:
    group = str(uuid.uuid4())
    callback = msg("chord")
    joins = [ChordJoin(group, i, 2, f"part{i}".encode(), callback) for i in range(2)]
    assert broker.chord_join(joins[0]) is False
    assert broker.chord_join(joins[0]) is False  # redelivered header task
    assert_nothing_claimable(broker, ["chord"])
    assert broker.chord_join(joins[1]) is True
    assert broker.chord_join(joins[1]) is False
    assert claim_soon(broker, ["chord"]).id == callback.id
    assert_nothing_claimable(broker, ["chord"])
    assert broker.chord_parts(group) == [b"part0", b"part1"]


def test_settle_joins_the_chord(broker: Broker) -> None:
    group = str(uuid.uuid4())
    callback = msg("chord")
    parts = [msg("default") for _ in range(2)]
    broker.enqueue(parts)
    for i, _ in enumerate(parts):
        delivery = claim_soon(broker, ["default"])
        join = ChordJoin(group, i, 2, f"v{i}".encode(), callback)
        outcome = Complete(chord=join) if i == 0 else DeadLetter(reason="part failed", chord=join)
        assert broker.settle(delivery, outcome)
    assert claim_soon(broker, ["chord"]).id == callback.id
    assert broker.chord_parts(group) == [b"v0", b"v1"]


def test_chord_parts_expire_with_results(make_broker: BrokerMaker) -> None:
    broker = make_broker(result_expires=1)
    group = str(uuid.uuid4())
    assert broker.chord_join(ChordJoin(group, 0, 2, b"v0", msg("chord"))) is False
    assert broker.chord_parts(group) == [b"v0"]
    poll(lambda: broker.chord_parts(group) == [], "the chord parts to expire", every=0.1)


def test_chord_callback_fires_once_among_many_processes(broker: Broker) -> None:
    needs_processes(broker)
    group = str(uuid.uuid4())
    callback = msg("chord")
    size = 50

    def join(i: int) -> int:
        index = i % size  # process 50 repeats index 0: a redelivered header task
        fired = broker.chord_join(ChordJoin(group, index, size, str(index).encode(), callback))
        return 10 if fired else 11

    codes = fork_children(size + 1, join)
    assert sorted(set(codes)) == [10, 11], codes
    assert codes.count(10) == 1
    assert claim_soon(broker, ["chord"]).id == callback.id
    assert_nothing_claimable(broker, ["chord"])
    assert broker.chord_parts(group) == [str(i).encode() for i in range(size)]


def test_fire_time_is_claimed_once_among_many_processes(broker: Broker) -> None:
    needs_processes(broker)
    fire_time = float(int(time.time()))
    sent = msg("periodic")

    def race(_: int) -> int:
        return 10 if broker.claim_fire_time("every-minute", fire_time, sent) else 11

    codes = fork_children(20, race)
    assert codes.count(10) == 1 and codes.count(11) == 19, codes
    assert claim_soon(broker, ["periodic"]).id == sent.id
    assert_nothing_claimable(broker, ["periodic"])


def test_fire_time_dedup_is_per_name_and_time(broker: Broker) -> None:
    now = float(int(time.time()))
    assert broker.claim_fire_time("a", now, None) is True
    assert broker.claim_fire_time("a", now, None) is False
    assert broker.claim_fire_time("a", now + 60, None) is True
    assert broker.claim_fire_time("b", now, None) is True
    assert_nothing_claimable(broker, ["default"])


def test_last_fire_times_are_the_newest_recorded_per_name(broker: Broker) -> None:
    now = float(int(time.time())) + 0.5  # a fraction survives the round trip too
    assert broker.last_fire_times(["a", "b"]) == {}
    assert broker.claim_fire_time("a", now - 60, None) is True
    # A lagging scheduler claiming an older fire time later doesn't move "last" back.
    assert broker.claim_fire_time("a", now - 120, None) is True
    assert broker.claim_fire_time("a", now - 60, None) is False
    assert broker.claim_fire_time("b", now - 30, msg("periodic")) is True
    assert broker.last_fire_times(["a", "b", "never-fired"]) == {"a": now - 60, "b": now - 30}
    assert broker.last_fire_times(["b"]) == {"b": now - 30}
    assert broker.last_fire_times([]) == {}
    assert broker.claim_fire_time("a", now, None) is True
    assert broker.last_fire_times(["a"]) == {"a": now}


# ----------------------------------------------------------------------------- results


def test_result_store_get_forget(broker: Broker) -> None:
    needs_results(broker)
    task_id = str(uuid.uuid4())
    assert broker.get_result(task_id) is None
    record = ResultRecord(
        task_id=task_id,
        state=SUCCESS,
        result={"n": [1, 2]},
        name="tests.noop",
        children=("c1",),
        args=(1,),
        kwargs={"x": 2},
        date_done=time.time(),
    )
    broker.store_result(record)
    assert broker.get_result(task_id) == record
    broker.store_result(result(task_id, "overwritten"))
    again = broker.get_result(task_id)
    assert again is not None and again.result == "overwritten"
    broker.forget_result(task_id)
    assert broker.get_result(task_id) is None


def test_result_expires(make_broker: BrokerMaker) -> None:
    broker = make_broker(result_expires=1)
    needs_results(broker)
    task_id = str(uuid.uuid4())
    broker.store_result(result(task_id, 1))
    assert broker.get_result(task_id) is not None
    poll(lambda: broker.get_result(task_id) is None, "the result to expire", every=0.1)


def test_wait_for_result_wakes_when_another_thread_stores_it(broker: Broker) -> None:
    needs_results(broker)
    task_id = str(uuid.uuid4())
    waiting = threading.Event()

    def finisher() -> None:
        waiting.wait(DEADLINE)
        broker.store_result(result(task_id, None, STARTED))  # not ready: keep waiting
        time.sleep(0.05)
        broker.store_result(result(task_id, "finished"))

    thread = threading.Thread(target=finisher)
    thread.start()
    try:
        waiting.set()
        started = time.monotonic()
        record = broker.wait_for_result(task_id, 60)
        assert time.monotonic() - started < 45, "wait_for_result() missed the result"
        assert record is not None and (record.state, record.result) == (SUCCESS, "finished")
    finally:
        thread.join(DEADLINE)


def test_wait_for_result_times_out_with_the_latest_record(broker: Broker) -> None:
    needs_results(broker)
    task_id = str(uuid.uuid4())
    assert broker.wait_for_result(task_id, 0.1) is None
    broker.store_result(result(task_id, None, STARTED))
    record = broker.wait_for_result(task_id, 0.1)
    assert record is not None and record.state == STARTED


# ----------------------------------------------------------------------------- revoke, purge, stats


def test_revoke_removes_a_waiting_task(broker: Broker) -> None:
    kept, revoked = msg(), msg()
    broker.enqueue([revoked, kept])
    assert broker.revoke(revoked.id) is True
    if not broker.capabilities.revoke_deletes:
        assert broker.is_revoked(revoked.id)
        return
    assert claim_soon(broker, ["default"]).id == kept.id
    assert_nothing_claimable(broker, ["default"])


def test_revoke_removes_a_scheduled_task(broker: Broker) -> None:
    scheduled = msg(eta=time.time() + 0.3)
    broker.enqueue([scheduled])
    assert broker.revoke(scheduled.id) is True
    if not broker.capabilities.revoke_deletes:
        assert broker.is_revoked(scheduled.id)
        return
    assert stats_of(broker, "default")[:2] == (0, 0)
    time.sleep(0.35)  # past its eta: it must not come back
    assert_nothing_claimable(broker, ["default"])


def test_revoke_leaves_a_running_task_to_its_worker(broker: Broker) -> None:
    if not broker.capabilities.revoke_deletes:
        pytest.skip("revoke only records ids on this broker")
    broker.enqueue([msg()])
    delivery = claim_soon(broker, ["default"])
    assert broker.revoke(delivery.id) is False
    assert broker.settle(delivery, Complete())


def test_queued_task_reads_a_task_back_until_it_is_gone(broker: Broker) -> None:
    needs(broker, "finds_queued")
    eta = time.time() + 3600
    later = msg("inspect", priority=3, eta=eta, args=(1, "x"), kwargs={"k": [2]}, headers={"parent_id": "p"})
    soon = msg("inspect", priority=5)
    broker.enqueue([later, soon])
    found = broker.queued_task(later.id)
    assert found is not None and found.error is None
    assert (found.id, found.queue, found.state, found.priority, found.deliveries) == (
        later.id,
        "inspect",
        "scheduled",
        3,
        0,
    )
    assert found.due == pytest.approx(eta, abs=0.01)
    assert found.message == later and found.raw == later.encode()
    ready = broker.queued_task(soon.id)
    assert ready is not None and (ready.state, ready.priority, ready.deliveries) == ("ready", 5, 0)
    delivery = claim_soon(broker, ["inspect"])
    assert delivery.id == soon.id
    running = broker.queued_task(soon.id)
    assert running is not None and (running.state, running.deliveries) == ("running", 1)
    assert broker.settle(delivery, Complete())
    assert broker.queued_task(soon.id) is None  # finished tasks leave the broker
    assert broker.revoke(later.id)
    assert broker.queued_task(later.id) is None
    assert broker.queued_task("no-such-task") is None


def test_queued_task_is_none_where_queues_cannot_be_searched(broker: Broker) -> None:
    if broker.capabilities.finds_queued:
        pytest.skip("capabilities.finds_queued is True on this broker")
    waiting = msg("inspect")
    broker.enqueue([waiting])
    assert broker.queued_task(waiting.id) is None
    assert claim_soon(broker, ["inspect"]).id == waiting.id  # the task itself is there all along


def test_queue_stats_counts_waiting_delayed_running(broker: Broker) -> None:
    broker.enqueue([msg("stats"), msg("stats"), msg("stats", eta=time.time() + 3600)])
    claim_soon(broker, ["stats"])
    [row] = [r for r in broker.queue_stats() if r.queue == "stats"]
    assert row.waiting == 1
    if not broker.capabilities.full_stats:
        return
    assert (row.delayed, row.running) == (1, 1)
    assert row.oldest_waiting_age is not None and row.oldest_waiting_age >= 0


def test_purge_deletes_waiting_tasks_not_running_ones(broker: Broker) -> None:
    broker.enqueue([msg("p1") for _ in range(3)] + [msg("p1", eta=time.time() + 3600), msg("p2")])
    running = claim_soon(broker, ["p1"])
    if broker.capabilities.full_stats:
        assert broker.purge(["p1"]) == 3
        assert stats_of(broker, "p1") == (0, 0, 1)
    else:  # only ready tasks are visible: the scheduled one stays
        assert broker.purge(["p1"]) == 2
        assert stats_of(broker, "p1")[0] == 0
    assert broker.settle(running, Complete())
    assert stats_of(broker, "p2")[0] == 1


def test_heartbeat_workers_and_forget(broker: Broker) -> None:
    before = time.time()
    info = WorkerInfo("hb-node", "host1", 42, ("default", "other"), 4, before, processed=1)
    broker.heartbeat(info)
    broker.heartbeat(WorkerInfo("hb-node", "host1", 42, ("default", "other"), 4, before, processed=7))
    [seen] = [w for w in broker.workers() if w.node == "hb-node"]
    assert seen.queues == ("default", "other") and seen.processed == 7 and seen.hostname == "host1"
    assert seen.last_seen >= before - 1
    broker.forget_worker("hb-node")
    assert all(w.node != "hb-node" for w in broker.workers())


def test_workers_are_listed_newest_heartbeat_first(broker: Broker) -> None:
    now = time.time()
    for node in ("older", "newer"):
        broker.heartbeat(WorkerInfo(node, "host", 1, ("default",), 1, now))
        poll(lambda node=node: any(w.node == node for w in broker.workers()), f"{node}'s heartbeat")
    time.sleep(0.01)  # distinct heartbeat times even on a coarse clock
    broker.heartbeat(WorkerInfo("newer", "host", 1, ("default",), 1, now))
    nodes = [w.node for w in broker.workers() if w.node in {"older", "newer"}]
    assert nodes == ["newer", "older"]


# ----------------------------------------------------------------------------- dead letters


def test_dead_letters_list_without_consuming_them(broker: Broker) -> None:
    delivery = make_dead(broker, reason="it broke")
    listed = broker.list_dead()
    assert listed == broker.list_dead()
    [record] = listed
    assert (record.id, record.queue, record.task, record.reason) == (
        delivery.id,
        "default",
        "tests.noop",
        "it broke",
    )
    assert record.raw == delivery.raw
    assert record.deliveries == 1


def test_dead_letter_retry_puts_the_payload_back_unchanged(broker: Broker) -> None:
    delivery = make_dead(broker)
    assert broker.retry_dead([delivery.id]) == 1
    assert broker.list_dead() == []
    again = claim_soon(broker, ["default"])
    assert again.id == delivery.id
    assert again.raw == delivery.raw
    assert again.deliveries == 1


def test_dead_letter_retry_all(broker: Broker) -> None:
    dead = [make_dead(broker, "dl1"), make_dead(broker, "dl2")]
    assert broker.retry_dead() == 2
    assert broker.list_dead() == []
    assert claim_soon(broker, ["dl1"]).raw == dead[0].raw
    assert claim_soon(broker, ["dl2"]).raw == dead[1].raw


def test_dead_letter_retry_keeps_it_while_its_id_is_waiting(broker: Broker) -> None:
    needs(broker, "unique_ids")
    delivery = make_dead(broker)
    broker.enqueue([msg(id=delivery.id, args=("a new run",))])
    assert broker.retry_dead([delivery.id]) == 0
    assert [r.id for r in broker.list_dead()] == [delivery.id]
    assert broker.retry_dead() == 0
    rerun = claim_soon(broker, ["default"])
    assert broker.settle(rerun, Complete())
    assert broker.retry_dead([delivery.id]) == 1
    assert claim_soon(broker, ["default"]).raw == delivery.raw


def test_dead_letters_expire_after_their_ttl(make_broker: BrokerMaker) -> None:
    broker = make_broker(dead_letter_ttl=0.5)
    make_dead(broker)
    assert len(broker.list_dead()) == 1
    poll(lambda: broker.list_dead() == [], "the dead letter to expire", every=0.1)


def test_dead_letter_purge(broker: Broker) -> None:
    for _ in range(3):
        make_dead(broker)
    assert broker.purge_dead() == 3
    assert broker.list_dead() == []
    assert broker.retry_dead() == 0


def test_dead_letters_are_capped_keeping_the_newest(make_broker: BrokerMaker) -> None:
    broker = make_broker(dead_letter_max=3)
    ids = [make_dead(broker).id for _ in range(5)]
    assert [r.id for r in broker.list_dead()] == ids[:1:-1]


def test_dead_letter_paging_is_newest_first(broker: Broker) -> None:
    ids = [make_dead(broker).id for _ in range(4)]
    assert [r.id for r in broker.list_dead(limit=2)] == [ids[3], ids[2]]
    assert [r.id for r in broker.list_dead(limit=2, offset=2)] == [ids[1], ids[0]]


# ----------------------------------------------------------------------------- garbage in storage


_POISONED = b'{"v": 1, "id": "x", "task": "t", "q": "default", "a": [%s]}'


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff\xfe not json",
        b"[1, 2, 3]",
        b'{"v": 99, "id": "x"}',
        b'{"v": 1, "id": ""}',
        b"",
        _POISONED % b'{"__pq__": "dec", "v": "abc"}',
        _POISONED % b'{"__pq__": "td", "v": 1e300}',
        b'{"v": 1, "id": "x", "task": "t", "q": "default", "p": 1e999}',
        _POISONED % (b"[" * 100_000 + b"]" * 100_000),
    ],
    ids=[
        "binary",
        "array",
        "future-version",
        "empty-id",
        "empty",
        "bad-decimal",
        "bad-timedelta",
        "1e999",
        "deep",
    ],
)
def test_undecodable_payload_is_delivered_and_can_be_dead_lettered(
    make_broker: BrokerMaker, garbage: bytes
) -> None:
    inject_raw = getattr(make_broker.module, "inject_raw", None)
    if inject_raw is None:
        pytest.skip("this broker's factory has no inject_raw hook")
    broker = make_broker()
    inject_raw(broker, "default", garbage)
    good = msg()
    broker.enqueue([good])

    bad = claim_soon(broker, ["default"])
    assert bad.message is None
    assert bad.error
    assert bad.raw == garbage
    assert bad.deliveries == 1
    reason = f"undecodable payload: {bad.error}"
    assert broker.settle(bad, DeadLetter(reason=reason))
    [record] = broker.list_dead()
    assert (record.id, record.reason, record.raw, record.task) == (bad.id, reason, garbage, None)

    assert claim_soon(broker, ["default"]).id == good.id


def test_payload_over_max_message_size_is_delivered_undecodable_without_parsing(
    make_broker: BrokerMaker,
) -> None:
    """A message larger than ``max_message_size`` (the app's ``task_max_message_size``)
    found in storage is delivered with the size as its error, unparsed, and can be
    dead-lettered on that first delivery; the next task is claimed normally."""
    broker = make_broker(max_message_size=2048)
    big = msg(args=("x" * 4096,))
    broker.enqueue([big])
    good = msg()
    broker.enqueue([good])

    bad = claim_soon(broker, ["default"])
    assert (bad.id, bad.message, bad.deliveries) == (big.id, None, 1)
    assert bad.error is not None and "over the 2048-byte limit" in bad.error
    assert broker.settle(bad, DeadLetter(reason=f"undecodable message: {bad.error}"))
    [record] = broker.list_dead()
    assert record.id == big.id and "over the 2048-byte limit" in record.reason
    assert claim_soon(broker, ["default"]).id == good.id
