"""RabbitMQ on the rare paths (issue 24): each test forces one interleaving that used to lose
a task, a callback or a result, against the real RabbitMQ 4 and a SQLite result backend."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from potatoq.brokers.base import ChordJoin, Complete, ResultRecord, WorkerInfo
from potatoq.brokers.rabbitmq import RabbitMQBroker, declare, lease
from potatoq.brokers.rabbitmq.topology import Topology
from potatoq.exceptions import OperationalError
from potatoq.states import REVOKED, SUCCESS

from .test_broker import Rabbit, claim_soon, msg, nothing_claimable, poll, rabbit, ready_count

__all__ = ["rabbit"]  # the fixture, imported for the tests here


@contextmanager
def failing_publishes(broker: RabbitMQBroker, count: int = 1) -> Iterator[list[int]]:
    """The next ``count`` confirmed publishes of ``broker`` fail as if the connection dropped
    before RabbitMQ confirmed them (nothing is sent)."""
    link = broker._process().link
    publish = link.publish
    failed: list[int] = []

    def flaky(items: Any) -> Any:
        if len(failed) < count:
            failed.append(len(items))
            raise OperationalError("injected: the publish was lost")
        return publish(items)

    link.publish = flaky  # type: ignore[method-assign]
    try:
        yield failed
    finally:
        link.publish = publish  # type: ignore[method-assign]


def chord_of_two(broker: RabbitMQBroker) -> tuple[Callable[[int], ChordJoin], Any]:
    callback = msg("cb")
    group = f"g-{uuid.uuid4().hex[:8]}"

    def join(index: int) -> ChordJoin:
        return ChordJoin(group_id=group, index=index, size=2, value=b"%d" % index, callback=callback)

    broker.enqueue([msg("hdr", id=f"{group}-0"), msg("hdr", id=f"{group}-1")])
    return join, callback


def done(task_id: str, result: object = 1) -> Complete:
    return Complete(result=ResultRecord(task_id=task_id, state=SUCCESS, result=result, date_done=time.time()))


# ----------------------------------------------------------------------------- chord callbacks


def test_a_chord_callback_whose_publish_failed_is_sent_when_the_settle_is_retried(rabbit: Rabbit) -> None:
    broker = rabbit()
    join, callback = chord_of_two(broker)
    assert broker.settle(claim_soon(broker, ["hdr"]), Complete(chord=join(0)))
    last = claim_soon(broker, ["hdr"])
    with failing_publishes(broker) as failed, pytest.raises(OperationalError):
        broker.settle(last, Complete(chord=join(1)))  # joined, then the callback publish fails
    assert failed == [1]
    # The worker retries a settle that failed on a connection error (settle_reliably).
    assert broker.settle(last, Complete(chord=join(1)))
    assert claim_soon(broker, ["cb"]).id == callback.id


def test_a_chord_callback_lost_in_a_crash_after_the_join_is_sent_by_the_redelivered_part(
    rabbit: Rabbit,
) -> None:
    broker = rabbit()
    join, callback = chord_of_two(broker)
    assert broker.settle(claim_soon(broker, ["hdr"]), Complete(chord=join(0)))
    last = claim_soon(broker, ["hdr"])
    with failing_publishes(broker), pytest.raises(OperationalError):
        broker.settle(last, Complete(chord=join(1)))
    broker.close()  # the process dies: RabbitMQ returns the unacked part
    other = rabbit()
    again = claim_soon(other, ["hdr"])
    assert (again.id, again.deliveries) == (last.id, 2)
    assert other.settle(again, Complete(chord=join(1)))
    got = claim_soon(other, ["cb"])
    assert got.id == callback.id
    assert other.settle(got, done(callback.id))
    assert nothing_claimable(other, ["cb"])


def test_a_second_copy_of_a_finished_callback_is_dropped_at_claim(rabbit: Rabbit) -> None:
    broker = rabbit()
    callback = msg("cb")
    broker._publish_once(callback)
    broker._publish_once(callback)
    broker.enqueue([msg("cb", id=callback.id)])  # a plain message under the same id
    first = claim_soon(broker, ["cb"])
    assert broker.settle(first, done(callback.id))
    plain = claim_soon(broker, ["cb"])  # the duplicate was skipped; the plain one runs
    assert plain.id == callback.id and plain.message is not None
    assert broker.settle(plain, Complete())
    assert nothing_claimable(broker, ["cb"])


# ----------------------------------------------------------------------------- periodic fires


def leader(rabbit: Rabbit) -> RabbitMQBroker:
    broker = rabbit()
    poll(broker.scheduler_lease, "this process to hold the scheduler token")
    return broker


def test_a_periodic_run_whose_publish_failed_is_sent_on_the_next_tick(rabbit: Rabbit) -> None:
    broker = leader(rabbit)
    fire_time = float(int(time.time()))
    with failing_publishes(broker), pytest.raises(OperationalError):
        broker.claim_fire_time("nightly", fire_time, msg("periodic"))
    # The scheduler asks for the same fire time again on its next tick.
    assert broker.claim_fire_time("nightly", fire_time, msg("periodic")) is True
    assert claim_soon(broker, ["periodic"]).message is not None
    assert broker.claim_fire_time("nightly", fire_time, msg("periodic")) is False
    assert broker.last_fire_times(["nightly"]) == {"nightly": fire_time}
    assert nothing_claimable(broker, ["periodic"])


def test_a_periodic_run_lost_with_its_leader_is_sent_by_the_next_leader(rabbit: Rabbit) -> None:
    first = leader(rabbit)
    second = rabbit()
    assert second.scheduler_lease() is False  # waits behind the first
    fire_time = float(int(time.time()))
    with failing_publishes(first), pytest.raises(OperationalError):
        first.claim_fire_time("nightly", fire_time, msg("periodic"))
    first.close()  # the leader dies before it could send the run
    poll(second.scheduler_lease, "the token to move to the second process")
    assert second.claim_fire_time("nightly", fire_time, msg("periodic")) is True
    assert claim_soon(second, ["periodic"]).message is not None
    assert nothing_claimable(second, ["periodic"])


def test_a_process_not_leading_leaves_an_unsent_fire_time_to_the_leader(rabbit: Rabbit) -> None:
    sender = rabbit()
    fire_time = float(int(time.time()))
    with failing_publishes(sender), pytest.raises(OperationalError):
        sender.claim_fire_time("nightly", fire_time, msg("periodic"))
    assert rabbit().claim_fire_time("nightly", fire_time, msg("periodic")) is False
    assert nothing_claimable(sender, ["periodic"])


# ----------------------------------------------------------------------------- late results


def test_a_late_result_of_a_lost_claim_never_replaces_the_newer_claims(rabbit: Rabbit) -> None:
    """A passes its "still mine?" check, then loses the delivery before its result write
    (paused past the heartbeat timeout); B runs the task again and stores its result; A's
    write then lands. It must be refused, and A's settle with it."""
    a, b = rabbit(), rabbit()
    sent = msg("late")
    a.enqueue([sent])
    stale = claim_soon(a, ["late"])
    link = a._process().link
    intake = a._process().intake
    checked = intake.is_current_now

    def check_then_lose_the_delivery(token: str) -> bool | None:
        answer = checked(token)
        generation = link.generation
        link.call_soon(lambda: link.work.basic_ack(999_999) if link.work else None)  # channel error
        poll(lambda: link.generation != generation, "A's work channel to be replaced")
        newer = claim_soon(b, ["late"])
        assert (newer.id, newer.deliveries) == (sent.id, 2)
        assert b.settle(newer, done(sent.id, "B"))
        return answer

    intake.is_current_now = check_then_lose_the_delivery  # type: ignore[method-assign]
    try:
        assert a.settle(stale, done(sent.id, "A")) is False
    finally:
        intake.is_current_now = checked  # type: ignore[method-assign]
    record = b.get_result(sent.id)
    assert record is not None and record.result == "B"


# ----------------------------------------------------------------------------- revoke


def test_revoke_never_replaces_a_result_that_lands_while_it_runs(rabbit: Rabbit) -> None:
    broker = rabbit()
    backend: Any = broker.backend
    store, store_fenced = backend.store_result, backend.store_result_fenced
    landed: list[str] = []

    def result_lands_first(write: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(record: ResultRecord, *args: Any, **kwargs: Any) -> Any:
            if record.state == REVOKED and not landed:  # the worker's write wins the race
                landed.append(record.task_id)
                store(ResultRecord(task_id=record.task_id, state=SUCCESS, result=7, date_done=time.time()))
            return write(record, *args, **kwargs)

        return wrapped

    backend.store_result = result_lands_first(store)
    backend.store_result_fenced = result_lands_first(store_fenced)
    try:
        assert broker.revoke("racing") is False
    finally:
        backend.store_result, backend.store_result_fenced = store, store_fenced
    assert landed == ["racing"]
    record = broker.get_result("racing")
    assert record is not None and (record.state, record.result) == (SUCCESS, 7)


# ----------------------------------------------------------------------------- dead nodes


def test_a_dead_nodes_heartbeat_record_is_deleted_once_its_tasks_are_back(rabbit: Rabbit) -> None:
    broker = rabbit(heartbeat=1)  # a silent connection is closed (its tasks returned) within 2 s

    def info(node: str) -> WorkerInfo:
        return WorkerInfo(node=node, hostname="h", pid=1, queues=("default",), concurrency=1, started_at=0.0)

    broker.heartbeat(info("dead-node"))

    def dead_node_forgotten() -> bool:
        broker.heartbeat(info("live-node"))
        broker.recover(dead_after=0.5, max_deliveries=5)
        return "dead-node" not in {w.node for w in broker.workers()}

    poll(dead_node_forgotten, "recover to delete the dead node's heartbeat record")
    assert {w.node for w in broker.workers()} == {"live-node"}


# ----------------------------------------------------------------------------- scheduler token


def test_the_scheduler_token_is_renewed_without_leaving_its_holder(
    rabbit: Rabbit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The held token is acked and replaced every RENEW_EVERY seconds, so no delivery stays
    unacked past RabbitMQ's consumer timeout; single-active-consumer keeps it here."""
    monkeypatch.setattr(lease, "RENEW_EVERY", 0.3)
    holder = leader(rabbit)
    waiting = rabbit()
    assert waiting.scheduler_lease() is False
    token = holder._process().lease
    poll(lambda: token.renewals >= 3, "three renewals of the token")
    assert holder.scheduler_lease() is True
    assert waiting.scheduler_lease() is False


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("POTATOQ_FAULTS_FULL", "") != "1",
    reason=(
        "150 s (two of RabbitMQ's consumer-timeout checks): run with POTATOQ_FAULTS_FULL=1, "
        "e.g. POTATOQ_FAULTS_FULL=1 make test PYTEST_ARGS=tests/brokers/rabbitmq"
    ),
)
def test_a_consumer_timeout_never_takes_the_renewed_token_back(
    rabbit: Rabbit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RabbitMQ 4 closes a channel whose delivery outlives the consumer timeout (checked about
    once a minute); here a 1 s x-consumer-timeout on the token queue, two checks long."""
    original = Topology.scheduler_queue

    def with_timeout(self: Topology) -> Any:
        decl = original(self)
        return dataclasses.replace(decl, arguments={**decl.arguments, "x-consumer-timeout": 1000})

    monkeypatch.setattr(Topology, "scheduler_queue", with_timeout)
    monkeypatch.setattr(lease, "RENEW_EVERY", 0.5)
    holder = leader(rabbit)
    token = holder._process().lease
    channel = token._channel
    deadline = time.monotonic() + 150  # past two of RabbitMQ's consumer-timeout checks
    while time.monotonic() < deadline:
        assert token._channel is channel and holder.scheduler_lease(), "the token was taken back"
        time.sleep(1)
    assert token.renewals > 100


# ----------------------------------------------------------------------------- registry


def test_the_registry_keeps_one_entry_per_queue_across_a_thousand_recycles(rabbit: Rabbit) -> None:
    """Each process start, child recycle or lost work channel declares its queues again;
    that declaration (what a recycled child runs) is repeated here 1,000 times."""
    broker = rabbit()
    broker.enqueue([msg("reg")])
    state = broker._process()
    for _ in range(1000):
        state.link.run(declare.ensure_queue, state.link, broker.topology, "reg", broker.config.url)
    assert ready_count(broker, broker.topology.registry) == 1
    assert broker.list_dead() == []  # reads the registry
    assert ready_count(broker, broker.topology.registry) == 1


# ----------------------------------------------------------------------------- fork


def test_a_child_forked_while_the_io_thread_holds_a_lock_connects_and_publishes(rabbit: Rabbit) -> None:
    """The worker supervisor forks while its pika I/O thread runs. The child makes its own
    connection; what it shares with the parent are module and broker locks, which the fork
    may copy in a held state. Force that: the I/O thread holds the delay cascade's lock and
    the broker's lock is held by another thread at the fork."""
    broker = rabbit()
    broker.enqueue([msg("fork")])
    link = broker._process().link
    held, release = threading.Event(), threading.Event()

    def hold_on_the_io_thread() -> None:
        with declare._CASCADE_LOCK:
            held.set()
            release.wait(30)

    link.call_soon(hold_on_the_io_thread)
    assert held.wait(10)
    with broker._lock:
        pid = os.fork()
        if pid == 0:  # the child: never return into pytest
            code = 1
            try:
                broker.migrate()  # declares the delay cascade: takes the cascade's lock
                broker.enqueue([msg("fork")])
                code = 0
            finally:
                os._exit(code)
    release.set()
    deadline = time.monotonic() + 30
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung on a lock copied in a held state")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    assert ready_count(broker, broker.topology.band_queue("fork", 0)) == 2


def test_two_starts_of_the_token_lease_at_once_leave_one_consumer_that_gets_the_token(rabbit: Rabbit) -> None:
    # A request and a reconnect can start competing for the scheduler token at the same
    # time. Both used to open a consumer: the later one replaced the earlier in the lease,
    # and the earlier (the queue's active consumer) got the token on a channel the lease no
    # longer knew, so this process held it without knowing and nobody led.
    broker = rabbit(results=False)
    state = broker._process()
    scheduler_lease: lease.SchedulerLease = state.lease
    scheduler_lease._wanted = True

    def two_starts() -> None:
        state.link.spawn(scheduler_lease._start_op())
        state.link.spawn(scheduler_lease._start_op())

    state.link.call_soon(two_starts)
    poll(lambda: scheduler_lease.holding, "the token held by the lease")


def test_a_refused_first_token_is_published_again(rabbit: Rabbit) -> None:
    # RabbitMQ nacked the first token now and then when another process had declared the
    # queue a moment before (seen in about 1 of 8 runs of the test above); with a consumer
    # waiting on the queue nobody published another, and no process ever led the scheduler.
    broker = rabbit(results=False)
    state = broker._process()
    publish = state.link.publish
    refused: list[int] = []

    def refuse_the_first_token(items: list[Any]) -> Any:
        if not refused and items and items[0].body == b"scheduler token":
            refused.append(1)
            items[0].nacked = True  # as RabbitMQ's basic.nack would leave it
            return state.link.sleep(0)
        return publish(items)

    state.link.publish = refuse_the_first_token  # type: ignore[method-assign]
    try:
        poll(broker.scheduler_lease, "the token held after a refused first publish")
    finally:
        state.link.publish = publish  # type: ignore[method-assign]
    assert refused == [1]
