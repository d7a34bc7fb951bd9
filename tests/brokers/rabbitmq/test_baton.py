"""Which thread drives a process's AMQP connection (``potatoq.brokers.rabbitmq.baton``): a
busy worker's ack and the push of its next task are handled on the worker's own thread,
without a hop to the I/O thread; the I/O thread takes over once nobody drives (a task
runs), so heartbeats and pushes keep flowing.

Against the real RabbitMQ 4 (``POTATOQ_TEST_RABBITMQ_URL``), as ``test_broker.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika.channel
import pytest
from pika.adapters.utils.selector_ioloop_adapter import SelectorIOServicesAdapter

from potatoq.brokers.base import Complete
from potatoq.brokers.rabbitmq import baton
from potatoq.brokers.rabbitmq.consume import Intake

from .test_broker import WORKER, Rabbit, claim_soon, msg, poll


@pytest.fixture
def rabbit(tmp_path: Path) -> Iterator[Rabbit]:
    maker = Rabbit(tmp_path)
    yield maker
    maker.close()


@pytest.mark.parametrize("prefetch_multiplier", [1, 4])
def test_a_busy_workers_ack_and_next_push_run_on_its_own_thread(
    rabbit: Rabbit, monkeypatch: pytest.MonkeyPatch, prefetch_multiplier: int
) -> None:
    # The I/O thread takes the baton only when a queued step asks for it: whichever thread
    # handles the acks and pushes below is then decided by the code, not by a race. With a
    # prefetch of 4 the I/O thread drove all the time until frames were sent eagerly.
    monkeypatch.setattr(baton, "LAZY", 600.0)
    seen: dict[str, list[threading.Thread]] = {"ack": [], "push": []}
    ack, on_message = pika.channel.Channel.basic_ack, Intake._on_message

    def recording_ack(self: Any, *args: Any, **kwargs: Any) -> None:
        seen["ack"].append(threading.current_thread())
        ack(self, *args, **kwargs)

    def recording_push(self: Any, *args: Any) -> None:
        seen["push"].append(threading.current_thread())
        on_message(self, *args)

    monkeypatch.setattr(pika.channel.Channel, "basic_ack", recording_ack)
    monkeypatch.setattr(Intake, "_on_message", recording_push)
    broker = rabbit(results=False, prefetch_multiplier=prefetch_multiplier)
    broker.enqueue([msg() for _ in range(8)])
    delivery = claim_soon(broker, ["default"])
    for _ in range(7):
        applied, following = broker.settle_and_claim(delivery, Complete(), ["default"], WORKER)
        assert applied
        delivery = following or claim_soon(broker, ["default"])
    in_loop = list(seen["ack"])
    assert broker.settle(delivery, Complete())  # an operation: on the I/O thread
    me = threading.current_thread()
    # The first pushes may reach the I/O thread (it drove while the consumers started).
    assert seen["push"][-3:] == [me] * 3, seen["push"]
    # With a prefetch of 4 the acks of the loop go in pairs (see test_acks.py).
    frames = 3 if prefetch_multiplier == 1 else 2
    assert in_loop[-frames:] == [me] * frames, in_loop


def test_an_ack_leaves_without_a_writability_watch(rabbit: Rabbit, monkeypatch: pytest.MonkeyPatch) -> None:
    # pika buffers a frame and watches the socket for writability (two epoll_ctl calls and a
    # poll) before it sends; an ack onto an empty socket buffer is sent on the call instead.
    watches: list[int] = []
    set_writer = SelectorIOServicesAdapter.set_writer

    def recording_set_writer(self: Any, fd: int, on_writable: Any) -> None:
        watches.append(fd)
        set_writer(self, fd, on_writable)

    monkeypatch.setattr(SelectorIOServicesAdapter, "set_writer", recording_set_writer)
    broker = rabbit(results=False)
    broker.enqueue([msg() for _ in range(6)])
    delivery = claim_soon(broker, ["default"])
    before = len(watches)
    for _ in range(5):
        applied, following = broker.settle_and_claim(delivery, Complete(), ["default"], WORKER)
        assert applied
        delivery = following or claim_soon(broker, ["default"])
    assert len(watches) == before, f"{len(watches) - before} writability watches for 5 acks"
    assert broker.settle(delivery, Complete())


def test_the_io_thread_drives_once_nobody_else_does(rabbit: Rabbit) -> None:
    broker = rabbit(results=False)
    broker.enqueue([msg()])
    delivery = claim_soon(broker, ["default"])  # the last wait drove the connection here
    link = broker._process().link
    # While the task "runs" (this thread doesn't call the broker), the I/O thread drives.
    assert link._thread is not None
    io = link._thread.ident
    poll(lambda: link._driver == io, "the I/O thread to take the baton")
    assert broker.settle(delivery, Complete())
