"""The broker contract for cluster-wide concurrency limits (potatoq/brokers/limits.py): the
same fixtures as tests/test_brokers.py, once per broker in ``tests/factories``; brokers
without ``capabilities.concurrency_limits`` are skipped."""

from __future__ import annotations

import pytest

from potatoq.brokers.base import Broker, Complete, DeadLetter, Requeue, RetryLater
from potatoq.brokers.limits import HEADER
from potatoq.exceptions import InvalidName
from potatoq.message import Message

from .conftest import BrokerMaker
from .factories.rabbitmq import with_redis_backend
from .test_brokers import WORKER_A, WORKER_B, assert_nothing_claimable, claim_soon, msg, needs, recover_until


def limited(key: str, limit: int, queue: str = "default", **kw: object) -> Message:
    return msg(queue, headers={HEADER: [key, limit]}, **kw)


def usage(broker: Broker, key: str) -> tuple[int | None, int, int]:
    found = {u.key: u for u in broker.limits()}
    if key not in found:
        return (None, 0, 0)
    return found[key].limit, found[key].running, found[key].waiting


def nothing_claimable_now(broker: Broker, queues: list[str]) -> None:
    """:func:`assert_nothing_claimable`, a few times on a broker whose ready tasks reach a
    process asynchronously (RabbitMQ pushes them; each claim parks those that came)."""
    for _ in range(1 if broker.capabilities.full_stats else 3):
        assert_nothing_claimable(broker, queues)


@pytest.fixture
def lbroker(make_broker: BrokerMaker) -> Broker:
    broker = with_redis_backend(make_broker)()
    needs(broker, "concurrency_limits")
    return broker


def test_claim_stops_at_the_limit_and_a_settle_frees_the_slot(lbroker: Broker) -> None:
    sent = [limited("exports", 2) for _ in range(4)]
    lbroker.enqueue(sent)
    first, second = claim_soon(lbroker, ["default"]), claim_soon(lbroker, ["default"])
    assert [first.id, second.id] == [sent[0].id, sent[1].id]
    nothing_claimable_now(lbroker, ["default"])
    assert usage(lbroker, "exports") == (2, 2, 2)
    assert lbroker.settle(first, Complete()) is True
    third = claim_soon(lbroker, ["default"])
    assert third.id == sent[2].id
    assert_nothing_claimable(lbroker, ["default"])


def test_a_limited_key_does_not_hold_back_other_keys_or_unlimited_tasks(lbroker: Broker) -> None:
    blocked = [limited("slow[acme]", 1) for _ in range(3)]
    other = limited("slow[globex]", 1)
    free = msg()
    lbroker.enqueue([*blocked, other, free])
    got = {claim_soon(lbroker, ["default"]).id for _ in range(3)}
    assert got == {blocked[0].id, other.id, free.id}
    assert_nothing_claimable(lbroker, ["default"])


def test_every_way_a_run_ends_gives_its_slot_back(lbroker: Broker) -> None:
    lbroker.enqueue([limited("one", 1) for _ in range(5)])
    outcomes = [
        Complete(),
        DeadLetter(reason="boom"),
        Requeue(crashed=False),
    ]
    for outcome in outcomes:
        delivery = claim_soon(lbroker, ["default"])
        assert_nothing_claimable(lbroker, ["default"])
        assert lbroker.settle(delivery, outcome) is True
    delivery = claim_soon(lbroker, ["default"])
    assert delivery.message is not None
    retried = delivery.message.replace(retries=1)
    assert lbroker.settle(delivery, RetryLater(message=retried)) is True
    claim_soon(lbroker, ["default"])
    assert usage(lbroker, "one")[1] == 1


def test_recovery_of_a_dead_holder_gives_its_slot_back(make_broker: BrokerMaker) -> None:
    broker = make_broker(dead_after=0.2)
    needs(broker, "concurrency_limits")
    needs(broker, "recovers_dead_holders")
    sent = [limited("one", 1) for _ in range(2)]
    broker.enqueue(sent)
    lost = claim_soon(broker, ["default"], WORKER_A)
    assert_nothing_claimable(broker, ["default"], WORKER_B)
    recover_until(broker, dead_after=0.2, max_deliveries=5)
    again = claim_soon(broker, ["default"], WORKER_B)
    assert again.id == lost.id  # back in its place, and the freed slot let it run
    assert usage(broker, "one")[1] == 1
    assert broker.settle(again, Complete()) is True
    last = claim_soon(broker, ["default"], WORKER_B)
    assert broker.settle(last, Complete()) is True
    assert usage(broker, "one")[1] == 0


def test_a_limit_set_at_run_time_overrides_the_tasks_max(lbroker: Broker) -> None:
    lbroker.enqueue([limited("reports", 1) for _ in range(3)])
    claim_soon(lbroker, ["default"])
    assert_nothing_claimable(lbroker, ["default"])
    lbroker.set_limit("reports", 2)
    claim_soon(lbroker, ["default"])
    nothing_claimable_now(lbroker, ["default"])
    limit, running, waiting = usage(lbroker, "reports")
    assert (limit, running, waiting) == (2, 2, 1)
    assert {u.key: u.override for u in lbroker.limits()}["reports"] is True
    lbroker.set_limit("reports", None)
    assert usage(lbroker, "reports")[0] == 1


def test_keys_in_different_queues_share_their_slots(lbroker: Broker) -> None:
    lbroker.enqueue([limited("queue:exports", 1, "exports"), limited("queue:exports", 1, "other")])
    claim_soon(lbroker, ["exports"])
    assert_nothing_claimable(lbroker, ["other"])


def test_bad_limits_are_refused_naming_what_was_wrong(lbroker: Broker) -> None:
    with pytest.raises(ValueError, match="positive integer"):
        lbroker.set_limit("exports", 0)
    with pytest.raises(InvalidName, match="limit key"):
        lbroker.set_limit("", 3)


def test_a_retried_dead_letter_keeps_its_limit(lbroker: Broker) -> None:
    first = limited("one", 1)
    lbroker.enqueue([first])
    assert lbroker.settle(claim_soon(lbroker, ["default"]), DeadLetter(reason="boom")) is True
    lbroker.enqueue([limited("one", 1)])
    claim_soon(lbroker, ["default"])
    assert lbroker.retry_dead() == 1
    assert_nothing_claimable(lbroker, ["default"])


def test_purge_deletes_tasks_waiting_on_a_limit(lbroker: Broker) -> None:
    needs(lbroker, "full_stats")  # RabbitMQ parks them in the delay cascade, which purge can't see
    lbroker.enqueue([limited("one", 1, "exports") for _ in range(3)])
    running = claim_soon(lbroker, ["exports"])
    assert_nothing_claimable(lbroker, ["exports"])  # the others now wait on the limit
    assert lbroker.purge(["exports"]) == 2
    assert lbroker.settle(running, Complete()) is True
    assert_nothing_claimable(lbroker, ["exports"])


def test_limits_list_nothing_when_no_limit_is_used(lbroker: Broker) -> None:
    lbroker.enqueue([msg()])
    claim_soon(lbroker, ["default"])
    assert lbroker.limits() == []
