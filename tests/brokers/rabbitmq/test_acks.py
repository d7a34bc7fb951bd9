"""Acks sent in groups with a prefetch above 1 (``potatoq.brokers.rabbitmq.acks``): a busy
worker's acks go two to a frame with a prefetch of 4, an ack left waiting goes out while
the next task runs or when the broker closes, and a grouped ack never covers a delivery
that is still running.

Against the real RabbitMQ 4 (``POTATOQ_TEST_RABBITMQ_URL``), as ``test_broker.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika.channel
import pytest

from potatoq.brokers.base import Complete, Delivery
from potatoq.brokers.rabbitmq import baton
from potatoq.brokers.rabbitmq.broker import RabbitMQBroker

from .test_broker import WORKER, Rabbit, claim_soon, msg, nothing_claimable

QUEUES = ["default"]


@pytest.fixture
def rabbit(tmp_path: Path) -> Iterator[Rabbit]:
    maker = Rabbit(tmp_path)
    yield maker
    maker.close()


Sent = list[tuple[int, bool, threading.Thread]]
SENT = threading.Condition()  # notified on every ack sent


@pytest.fixture
def acks(monkeypatch: pytest.MonkeyPatch) -> Sent:
    """Every basic.ack sent: (delivery tag, multiple, the thread that sent it)."""
    sent: Sent = []
    ack = pika.channel.Channel.basic_ack

    def recording_ack(self: Any, delivery_tag: int = 0, multiple: bool = False) -> None:
        with SENT:
            sent.append((delivery_tag, multiple, threading.current_thread()))
            SENT.notify_all()
        ack(self, delivery_tag, multiple)

    monkeypatch.setattr(pika.channel.Channel, "basic_ack", recording_ack)
    return sent


def message_id(delivery: Delivery) -> str:
    assert delivery.message is not None
    return delivery.message.id


def buffered(broker: RabbitMQBroker, count: int) -> Delivery:
    """Claim the first delivery, then wait (driving the connection) until ``count`` more
    were pushed to the process's buffer, so the settles below find them there."""
    first = claim_soon(broker, QUEUES)
    state = broker._process()
    ready = state.link.wait_until(lambda: len(state.intake._buffer) >= count, 15)
    assert ready, f"RabbitMQ didn't push {count} more deliveries within 15 s"
    return first


def test_a_busy_workers_acks_go_two_to_a_frame_with_a_prefetch_of_4(rabbit: Rabbit, acks: Sent) -> None:
    broker = rabbit(results=False, prefetch_multiplier=4)
    broker.enqueue([msg() for _ in range(8)])
    delivery = buffered(broker, 3)
    settled = 0
    while True:
        applied, following = broker.settle_and_claim(delivery, Complete(), QUEUES, WORKER)
        assert applied
        settled += 1
        if settled == 8:
            break
        delivery = following or claim_soon(broker, QUEUES)
    assert any(multiple for _, multiple, _ in acks), acks
    broker.close()  # sends whatever ack still waits
    assert len(acks) < 8, acks
    # Every one of the 8 was acked: a fresh consumer finds none of them.
    assert nothing_claimable(rabbit(results=False), QUEUES)


def test_an_ack_left_waiting_goes_out_while_the_next_task_runs(rabbit: Rabbit, acks: Sent) -> None:
    # (prefetch_hold: the delivery still buffered is not handed back meanwhile, which would
    # send the waiting ack too)
    broker = rabbit(results=False, prefetch_multiplier=4, prefetch_hold=600)
    broker.enqueue([msg() for _ in range(3)])
    first = buffered(broker, 2)
    sent_before = len(acks)
    applied, following = broker.settle_and_claim(first, Complete(), QUEUES, WORKER)
    assert applied and following is not None
    assert len(acks) == sent_before, "the first ack was expected to wait for the second"
    # The next task "runs" (this thread leaves the connection alone): the I/O thread takes
    # the connection within baton.LAZY and sends the ack before it polls.
    io_thread = broker._process().link._thread
    with SENT:
        sent = SENT.wait_for(lambda: any(t is io_thread for _, _, t in acks[sent_before:]), 15)
    assert sent, f"the waiting ack was not sent by the I/O thread within 15 s: {acks}"
    assert broker.settle(following, Complete())


def test_closing_sends_an_ack_left_waiting(
    rabbit: Rabbit, acks: Sent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(baton, "LAZY", 600.0)  # the I/O thread never takes over meanwhile
    broker = rabbit(results=False, prefetch_multiplier=4)
    messages = [msg() for _ in range(3)]
    broker.enqueue(messages)
    first = buffered(broker, 2)
    sent_before = len(acks)
    applied, _ = broker.settle_and_claim(first, Complete(), QUEUES, WORKER)
    assert applied and len(acks) == sent_before
    broker.close()
    # The two never settled come back; the one settled does not.
    other = rabbit(results=False)
    left = []
    for _ in range(2):
        delivery = claim_soon(other, QUEUES)
        left.append(message_id(delivery))
        assert other.settle(delivery, Complete())
    assert sorted(left) == sorted(m.id for m in messages if m.id != message_id(first))
    assert nothing_claimable(other, QUEUES)


def test_a_grouped_ack_never_covers_a_delivery_still_running(
    rabbit: Rabbit, acks: Sent, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two threads' worth of work in one: the oldest delivery (the lowest tag) keeps running
    # while two later ones finish. A multiple ack of their tags would ack it too.
    monkeypatch.setattr(baton, "LAZY", 600.0)
    broker = rabbit(results=False, prefetch_multiplier=4)
    broker.enqueue([msg() for _ in range(4)])
    running = buffered(broker, 3)
    second = broker.claim(QUEUES, WORKER)
    assert second is not None
    applied, third = broker.settle_and_claim(second, Complete(), QUEUES, WORKER)  # waits
    assert applied and third is not None
    applied, fourth = broker.settle_and_claim(third, Complete(), QUEUES, WORKER)  # both go
    assert applied and fourth is not None
    assert len(acks) == 2, acks
    assert not any(multiple for _, multiple, _ in acks), acks
    assert broker.settle(running, Complete())  # still unacked, so RabbitMQ accepts its ack
    assert broker.settle(fourth, Complete())
    broker.close()
    assert nothing_claimable(rabbit(results=False), QUEUES)
