"""pika (AMQP 0.9.1) against RabbitMQ 4's own AMQP 1.0 client, for potatoq's pattern.

    python -m benchmarks.amqp10 URL [-n 5000] [--rounds 3] [--json FILE]

The pattern potatoq runs on RabbitMQ (issue 28): a durable quorum queue; a producer that
publishes one message at a time and waits for the broker to confirm it (AMQP 0.9.1:
publisher confirms; AMQP 1.0: the ``accepted`` outcome settled by the broker); two
consumer processes that hold at most ``prefetch`` unacknowledged deliveries each and
acknowledge each one after it arrived (AMQP 0.9.1: ``basic.qos`` + ``basic.ack``; AMQP 1.0:
link credit granted one at a time after each ``accepted`` disposition, so credit never
runs ahead of the settled deliveries). Nothing runs between a delivery and its ack: these
are the ceilings of each client, the most a worker on it could reach.

Each round measures, for each protocol in turn (the order alternates between rounds, as
this shared VM's speed drifts over minutes): confirmed publishes/s of n messages, then
deliveries/s of those n with prefetch 1, then again with prefetch 4. The report prints
every round, the medians and AMQP 1.0 ÷ 0.9.1 per round. Both protocols talk to the same
node on the same port (RabbitMQ 4 serves AMQP 1.0 beside 0.9.1); the queue is declared
(quorum) and deleted with pika for both, so only the measured steps differ.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from rabbitmq_amqp_python_client import (
    AddressHelper,
    AMQPMessagingHandler,
    Connection,
    Environment,
    Event,
    Message,
)

# The client's flow controller tops the credit up when a transfer *arrives*, so unsettled
# deliveries could pile up past the prefetch; _Acker grants credit when it settles instead.
from rabbitmq_amqp_python_client.amqp_consumer_handler import _DeferredFlowController

from . import ceiling
from .run import _ratio

PREFETCHES = (1, 4)
PROTOCOLS = ("0.9.1", "1.0")


def connect(url: str) -> tuple[Environment, Connection]:
    """An AMQP 1.0 connection to the node at ``url`` (same URL as pika's: same port)."""
    environment = Environment(uri=url)
    connection = environment.connection()
    connection.dial()
    return environment, connection


def publish_confirmed(url: str, queue: str, n: int) -> float:
    """AMQP 1.0: publish n messages, each settled ``accepted`` by the broker before the next
    (``Publisher.publish`` raises on ``rejected``/``released``); returns publishes/s."""
    environment, connection = connect(url)
    try:
        publisher = connection.publisher(AddressHelper.queue_address(queue))
        started = time.perf_counter()
        for _ in range(n):
            publisher.publish(Message(body=ceiling.BODY))
        rate = n / max(time.perf_counter() - started, 1e-9)
        publisher.close()
        return rate
    finally:
        environment.close()


class _Acker(AMQPMessagingHandler):
    """Accepts each delivery on arrival, then grants one credit: at most ``prefetch``
    deliveries are ever unsettled, as with AMQP 0.9.1's ``basic.qos``."""

    def __init__(self, count: int) -> None:
        super().__init__(auto_accept=False, auto_settle=True)
        self.handlers = [h for h in self.handlers if not isinstance(h, _DeferredFlowController)]
        self.count = count
        self.got = 0
        self.first: float | None = None
        self.last = 0.0

    def on_amqp_message(self, event: Event) -> None:
        if self.first is None:
            self.first = time.perf_counter()
        self.delivery_context.accept(event)
        self.got += 1
        if self.got >= self.count:
            self.last = time.perf_counter()
            # stop() closes the connection (sending this last disposition first) and makes
            # run() return; the container can't be used afterwards, so nothing else closes
            event.container.stop()  # type: ignore[union-attr]
            return
        event.link.flow(1)  # type: ignore[union-attr]


def _consume(url: str, queue: str, prefetch: int, count: int, out: Any) -> None:
    _environment, connection = connect(url)
    handler = _Acker(count)
    address = AddressHelper.queue_address(queue)
    consumer = connection.consumer(address, message_handler=handler, credit=prefetch)
    consumer.run()  # returns when the handler stopped the container
    assert handler.first is not None
    out.put((count - 1) / max(handler.last - handler.first, 1e-9))


def one_round(url: str, queue: str, n: int, protocol: str) -> dict[str, float]:
    """publish/s and deliveries/s at each prefetch, for one protocol."""
    figures: dict[str, float] = {}
    for prefetch in PREFETCHES:
        ceiling.fresh_queue(url, queue)
        try:
            if protocol == "1.0":
                published = publish_confirmed(url, queue, n)
                consumed = ceiling.consume_in_processes(_consume, (url, queue, prefetch), n)
            else:
                published = ceiling.publish_confirmed(url, queue, n)
                consumed = ceiling.consume_in_processes(ceiling._consume, (url, queue, prefetch), n)
        finally:
            ceiling.delete_queue(url, queue)
        figures.setdefault("publish", published)  # the first prefetch's publish is the figure
        figures[f"prefetch {prefetch}"] = consumed
    return figures


def run(url: str, n: int, rounds: int) -> dict[str, Any]:
    queue = f"potatoq_bench_amqp10_{os.getpid()}"
    load_start = os.getloadavg()
    by_round: list[dict[str, dict[str, float]]] = []
    for index in range(rounds):
        order = PROTOCOLS if index % 2 == 0 else PROTOCOLS[::-1]
        by_round.append({protocol: one_round(url, queue, n, protocol) for protocol in order})
    keys = list(by_round[0]["0.9.1"])
    medians = {p: {k: statistics.median(r[p][k] for r in by_round) for k in keys} for p in PROTOCOLS}
    ratios = [{k: r["1.0"][k] / r["0.9.1"][k] for k in keys} for r in by_round]
    return {
        "n": n,
        "load_start": load_start,
        "rounds": by_round,
        "medians": medians,
        "ratio_1_0_over_0_9_1": ratios,
    }


def _cell(old: float, new: float) -> str:
    return f"{old:,.0f} / {new:,.0f} ({_ratio(new, old)})"


def report(result: dict[str, Any]) -> str:
    keys = list(result["medians"]["0.9.1"])
    lines = [
        f"{result['n']:,} messages, {len(result['rounds'])} rounds, quorum queue, confirms, late ack",
        "",
        "| round | " + " | ".join(f"{k}/s: 0.9.1 / 1.0 (1.0 ÷ 0.9.1)" for k in keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    for index, row in enumerate(result["rounds"], 1):
        lines.append(f"| {index} | " + " | ".join(_cell(row["0.9.1"][k], row["1.0"][k]) for k in keys) + " |")
    med = result["medians"]
    lines.append("| median | " + " | ".join(_cell(med["0.9.1"][k], med["1.0"][k]) for k in keys) + " |")
    return "\n".join(lines)


def _loads(result: dict[str, Any]) -> str:
    keys = ("load_start", "load_end")
    return ", ".join(f"{key[5:]} {' / '.join(f'{x:.1f}' for x in result[key])}" for key in keys)


def write_json(path: str | None, data: Any) -> None:
    """``--json FILE``: the figures as JSON too (nothing when no file was asked for)."""
    if path:
        with open(path, "w") as fh:
            json.dump(data, fh, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    result = run(args.url, args.n, args.rounds)
    result["load_end"] = os.getloadavg()
    print(report(result))
    print(f"\nload average (1 / 5 / 15 min): {_loads(result)}; {os.cpu_count()} cores")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
