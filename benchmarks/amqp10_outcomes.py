"""What a quorum queue does with a delivery given back, by each way of giving it back.

    python -m benchmarks.amqp10_outcomes URL [--json FILE]

The question of issue 28: could a potatoq worker that shuts down gracefully return the
deliveries it prefetched but never ran with an AMQP 1.0 outcome (``released``, or
``modified`` with ``delivery-failed`` false) so that they go back to the head of their
queue without counting a delivery, instead of today's re-publish to the tail (which can
duplicate a task when the process dies between the publish and the ack)?

For each way of giving back, a fresh quorum queue with ``x-delivery-limit`` 2 and a
dead-letter queue gets two messages, ``A`` then ``B``; then six times a consumer with
credit / prefetch 1 takes the next delivery and gives it back that way. Printed: the
sequence of (body, delivery count) it saw (AMQP 1.0: the header's ``delivery-count``;
0.9.1: ``x-delivery-count``), and what is left in the queue and in the dead-letter queue.
If a way keeps handing out ``A`` with its count unchanged, it returns to the head without
counting; ``A, B, A, B`` means the tail; a growing count ends in the dead-letter queue.

Ways: AMQP 1.0 ``released``; ``modified`` (delivery-failed false); ``modified``
(delivery-failed true); a process that dies holding the delivery unsettled (AMQP 1.0);
AMQP 0.9.1 ``basic.nack(requeue=True)``; a process that dies holding it unacked (0.9.1).
This is a probe run against a real node (the shared RabbitMQ 4 of scripts/services), not
a benchmark: it measures no time.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from collections.abc import Callable
from typing import Any

import pika
from rabbitmq_amqp_python_client import AddressHelper, Delivery
from rabbitmq_amqp_python_client.options import ReceiverOptionUnsettled

from .amqp10 import connect, write_json

LIMIT = 2
STEPS = 6

Seen = tuple[str, int]


def _declare(channel: Any, queue: str) -> None:
    channel.queue_delete(queue)
    channel.queue_delete(queue + "_dlq")
    channel.queue_declare(queue + "_dlq", durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_declare(
        queue,
        durable=True,
        arguments={
            "x-queue-type": "quorum",
            "x-delivery-limit": LIMIT,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": queue + "_dlq",
        },
    )
    channel.confirm_delivery()
    for body in (b"A", b"B"):
        channel.basic_publish("", queue, body)


def _amqp10_step(url: str, queue: str, outcome: str) -> Seen | None:
    """Take the next delivery over AMQP 1.0 with credit 1 and give it back by ``outcome``."""
    environment, connection = connect(url)
    address = AddressHelper.queue_address(queue)
    blocking = connection._conn  # the proton BlockingConnection the client wraps
    # no credit up front and no flow controller: receive() grants exactly one credit, so no
    # second delivery arrives (and goes back, counted or not) when the link detaches
    receiver = blocking.create_receiver(address, credit=None, options=ReceiverOptionUnsettled(address))
    try:
        message = receiver.receive(timeout=3)
    except Exception:  # proton's Timeout: nothing left to deliver
        environment.close()
        return None
    seen = (bytes(message.body).decode(), int(message.delivery_count))
    if outcome == "died":
        return seen  # the caller, a child process, exits at once: the socket just goes away
    delivery = receiver.fetcher.unsettled.popleft()
    if outcome == "released":
        delivery.update(Delivery.RELEASED)
    else:
        delivery.local.failed = outcome == "modified-failed"
        delivery.local.undeliverable = False
        delivery.update(Delivery.MODIFIED)
    delivery.settle()
    receiver.close()  # flushes the disposition before the link detaches
    environment.close()
    return seen


def _amqp091_step(url: str, queue: str, outcome: str) -> Seen | None:
    """basic.get (unacked) the head, give it back by ``outcome``: basic.get, not a consumer,
    so that no second delivery is pushed and returned at the close."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    method, properties, body = channel.basic_get(queue, auto_ack=False)
    if method is None:
        connection.close()
        return None
    count = int((properties.headers or {}).get("x-delivery-count", 0))
    if outcome == "nack":
        channel.basic_nack(method.delivery_tag, requeue=True)
        connection.close()
    # "died": the caller, a child process, exits at once with the delivery unacked
    return (body.decode(), count)


def _die_holding(step: Callable[[str, str, str], Seen | None], url: str, queue: str, out: Any) -> None:
    out.put(step(url, queue, "died"))
    out.close()
    out.join_thread()  # the put is sent by a feeder thread: wait for it, then die
    os._exit(0)  # no close, no disposition: as a killed worker


def _crash_step(step: Callable[[str, str, str], Seen | None]) -> Callable[[str, str, str], Seen | None]:
    """``step`` taken in a child process that exits holding the delivery unsettled."""

    def crash(url: str, queue: str, _outcome: str) -> Seen | None:
        context = multiprocessing.get_context("spawn")
        out: Any = context.Queue()
        child = context.Process(target=_die_holding, args=(step, url, queue, out))
        child.start()
        seen: Seen | None = out.get(timeout=60)
        child.join(30)
        return seen

    return crash


WAYS: dict[str, tuple[Callable[[str, str, str], Seen | None], str]] = {
    "AMQP 1.0 released": (_amqp10_step, "released"),
    "AMQP 1.0 modified (delivery-failed false)": (_amqp10_step, "modified"),
    "AMQP 1.0 modified (delivery-failed true)": (_amqp10_step, "modified-failed"),
    "AMQP 1.0 process died holding it": (_crash_step(_amqp10_step), "died"),
    "AMQP 0.9.1 basic.nack requeue": (_amqp091_step, "nack"),
    "AMQP 0.9.1 process died holding it": (_crash_step(_amqp091_step), "died"),
}


def _depth(channel: Any, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def _settled(channel: Any, queue: str) -> None:
    """Wait (10 s at most) until both messages are back in the queue or dead-lettered: the
    last give-back (a nack, a dead connection) is applied by the queue after it replied."""
    deadline = time.monotonic() + 10
    while _depth(channel, queue) + _depth(channel, queue + "_dlq") < 2 and time.monotonic() < deadline:
        channel.connection.sleep(0.05)


def probe(url: str) -> dict[str, Any]:
    queue = f"potatoq_probe_outcomes_{os.getpid()}"
    admin = pika.BlockingConnection(pika.URLParameters(url))
    results: dict[str, Any] = {}
    try:
        for name, (step, outcome) in WAYS.items():
            channel = admin.channel()
            _declare(channel, queue)
            seen = [step(url, queue, outcome) for _ in range(STEPS)]
            _settled(channel, queue)
            results[name] = {
                "seen": [s for s in seen if s is not None],
                "left in queue": _depth(channel, queue),
                "dead-lettered": _depth(channel, queue + "_dlq"),
            }
            channel.queue_delete(queue)
            channel.queue_delete(queue + "_dlq")
            channel.close()
    finally:
        admin.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    results = probe(args.url)
    print(f"quorum queue, x-delivery-limit {LIMIT}, messages A then B; {STEPS} takes, each given back:\n")
    print("| given back by | (body, delivery count) seen | left in queue | dead-lettered |")
    print("|---|---|---|---|")
    for name, row in results.items():
        seen = ", ".join(f"{body} {count}" for body, count in row["seen"])
        print(f"| {name} | {seen} | {row['left in queue']} | {row['dead-lettered']} |")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
