"""RabbitMQ on the rare paths (issue 24): each test forces one interleaving that used to lose
a task, a callback or a result, against the real RabbitMQ 4 and a SQLite result backend."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from potatoq.brokers.base import ChordJoin, Complete, ResultRecord
from potatoq.brokers.rabbitmq import RabbitMQBroker
from potatoq.exceptions import OperationalError
from potatoq.states import SUCCESS

from .test_broker import Rabbit, claim_soon, msg, nothing_claimable, rabbit

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


def done(task_id: str) -> Complete:
    return Complete(result=ResultRecord(task_id=task_id, state=SUCCESS, result=1, date_done=time.time()))


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


def test_a_periodic_run_whose_publish_failed_is_sent_on_the_next_attempt(rabbit: Rabbit) -> None:
    broker = rabbit()
    fire_time = float(int(time.time()))
    with failing_publishes(broker), pytest.raises(OperationalError):
        broker.claim_fire_time("nightly", fire_time, msg("periodic"))
    # The scheduler tries the same fire time again on its next tick.
    assert broker.claim_fire_time("nightly", fire_time, msg("periodic")) is True
    assert claim_soon(broker, ["periodic"]).message is not None
    assert broker.claim_fire_time("nightly", fire_time, msg("periodic")) is False
    assert nothing_claimable(broker, ["periodic"])


def test_a_periodic_run_sent_twice_across_a_crash_runs_once(rabbit: Rabbit) -> None:
    leader = rabbit()
    fire_time = float(int(time.time()))

    def crash(point: str) -> None:
        if point == "fire-published":
            raise SystemExit("injected: the leader dies after publishing")

    leader.fault_hook = crash
    with pytest.raises(SystemExit):
        leader.claim_fire_time("nightly", fire_time, msg("periodic"))
    leader.close()
    follower = rabbit()  # the next leader sends the same, unrecorded fire time
    assert follower.claim_fire_time("nightly", fire_time, msg("periodic")) is True
    first = claim_soon(follower, ["periodic"])
    assert follower.settle(first, done(first.id))
    assert nothing_claimable(follower, ["periodic"])  # the second copy has the same id
