"""Pausing a queue, in the broker contract: the flag is stored in the broker, seen by every
broker instance on it (the fleet) and by a new one (a restart), and set exactly once by
racing callers. That workers stop claiming is tested on real workers in
``tests/worker/test_pause.py``."""

from __future__ import annotations

import threading

import pytest

from potatoq.brokers.base import Broker
from potatoq.exceptions import InvalidName

from .conftest import BrokerMaker
from .test_brokers import WORKER_B, claim_soon, msg, stats_of


def test_pause_is_stored_and_resume_clears_it(make_broker: BrokerMaker) -> None:
    broker = make_broker()
    assert broker.paused_queues() == {}
    assert broker.pause_queue("reports") is True
    assert broker.pause_queue("reports") is False  # already paused
    other = make_broker()  # another process's (or a restarted) broker on the same store
    assert set(other.paused_queues()) == {"reports"}
    broker.close()
    restarted = make_broker()
    assert set(restarted.paused_queues()) == {"reports"}
    assert restarted.resume_queue("reports") is True
    assert restarted.resume_queue("reports") is False
    assert other.paused_queues() == {}


def test_pause_records_when(broker: Broker) -> None:
    import time

    before = time.time()
    broker.pause_queue("mail")
    since = broker.paused_queues()["mail"]
    assert before - 60 <= since <= time.time() + 60  # server clocks may differ a little


def test_producers_still_enqueue_to_a_paused_queue(broker: Broker) -> None:
    broker.pause_queue("mail")
    broker.enqueue([msg("mail"), msg("mail")])
    assert stats_of(broker, "mail")[0] == 2


def test_pausing_one_queue_leaves_the_others(broker: Broker) -> None:
    broker.pause_queue("mail")
    broker.pause_queue("reports")
    broker.resume_queue("mail")
    assert set(broker.paused_queues()) == {"reports"}


def test_racing_pauses_set_the_flag_once(make_broker: BrokerMaker) -> None:
    brokers = [make_broker() for _ in range(6)]
    gate = threading.Barrier(len(brokers))
    won: list[bool] = []

    def pause(b: Broker) -> None:
        gate.wait()
        won.append(b.pause_queue("contended"))

    threads = [threading.Thread(target=pause, args=(b,)) for b in brokers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(won) == [False] * 5 + [True]
    assert set(brokers[0].paused_queues()) == {"contended"}


@pytest.mark.parametrize("name", ["", "bad name", "x" * 201, "semi;colon"])
def test_a_bad_queue_name_is_refused(broker: Broker, name: str) -> None:
    with pytest.raises(InvalidName):
        broker.pause_queue(name)
    with pytest.raises(InvalidName):
        broker.resume_queue(name)


def test_consume_only_leaves_nothing_of_the_other_queues_held(make_broker: BrokerMaker) -> None:
    """A worker that stops consuming a paused queue keeps nothing of it: what its consumers
    were pushed (RabbitMQ) is given back, so another worker can take it once resumed."""
    worker = make_broker()
    sent = msg("mail")
    worker.enqueue([sent])
    worker.wait(["mail", "other"], 2.0)  # consumers start; the message may be pushed here
    worker.consume_only(["other"])
    other = make_broker()
    assert claim_soon(other, ["mail"], WORKER_B).id == sent.id
