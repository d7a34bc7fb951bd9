"""What a late-acking consumer can reach on a RabbitMQ 4 quorum queue, whatever it runs.

    python -m benchmarks.ceiling URL [-n 6000]

A bare pika consumer does no work at all: it acks each delivery the moment it arrives.
With prefetch 1 the server sends the next message only once it has processed that ack
(on a quorum queue, a Raft command), so each process gets at most one message per round
trip. Two processes consume the same quorum queue with prefetch 1 (potatoq's setting),
then with prefetch 4 (Celery's default multiplier), and the combined rate of each is
printed as JSON. ``benchmarks.run`` puts the figures beside potatoq's processed/s on
RabbitMQ: the gap between them is what any prefetch-1 worker gives up, not potatoq's
own cost.

    python -m benchmarks.ceiling URL --ack-groups 1,2,4 [--prefetch 4] [--rounds 4]
                                     [--server-pid PID]

measures instead what acking in groups saves (``potatoq.brokers.rabbitmq.acks``): the same
consumers ack every K-th delivery with ``multiple=True`` (K=1: each on its own), rounds
alternating, and with ``--server-pid`` (the RabbitMQ node's ``beam.smp``, e.g. from
``ss -ltnpH 'sport = :5673'``) the node's CPU per message while they consume.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time
from typing import Any

import pika

QUEUE = "potatoq_bench_ceiling"
PROCESSES = 2
BODY = b"x" * 200  # about the size of a potatoq no-op message


def _consume(url: str, queue: str, prefetch: int, count: int, out: Any) -> None:
    """A bare consumer acking each delivery the moment it arrives; puts its rate on ``out``."""
    _consume_grouped(url, queue, prefetch, 1, count, out)


def _consume_grouped(url: str, queue: str, prefetch: int, group: int, count: int, out: Any) -> None:
    """A bare consumer acking every ``group``-th delivery as it arrives (with ``multiple``
    when ``group`` is above 1, so each ack covers the deliveries since the last one); puts
    its deliveries/s, first delivery to last, on ``out``."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    got = 0
    first: float | None = None

    def on_message(ch: Any, method: Any, _properties: Any, _body: bytes) -> None:
        nonlocal got, first
        if first is None:
            first = time.perf_counter()
        got += 1
        if got % group == 0 or got >= count:
            ch.basic_ack(method.delivery_tag, multiple=group > 1)
        if got >= count:
            ch.stop_consuming()

    channel.basic_consume(queue, on_message)
    channel.start_consuming()
    assert first is not None
    out.put((count - 1) / max(time.perf_counter() - first, 1e-9))
    connection.close()


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_groups(
    url: str, groups: list[int], prefetch: int, n: int, rounds: int, server: int | None
) -> dict[str, Any]:
    """Per ack group size: the medians over ``rounds`` of deliveries/s and of the server's
    CPU µs per message while consuming (None without ``server``)."""
    got: dict[int, list[tuple[float, float]]] = {g: [] for g in groups}
    for index in range(rounds):
        for group in groups if index % 2 == 0 else groups[::-1]:
            fresh_queue(url, QUEUE)
            try:
                publish_confirmed(url, QUEUE, n)
                before = cpu_seconds(server)
                rate = consume_in_processes(_consume_grouped, (url, QUEUE, prefetch, group), n)
                got[group].append((rate, (cpu_seconds(server) - before) / n * 1e6))
            finally:
                delete_queue(url, QUEUE)
    return {
        str(g): {
            "rate": statistics.median(r for r, _ in runs),
            "server_cpu_us": statistics.median(c for _, c in runs) if server is not None else None,
        }
        for g, runs in got.items()
    }


def fresh_queue(url: str, queue: str) -> None:
    """(Re)declare ``queue`` as an empty durable quorum queue."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        channel.queue_delete(queue)
        channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    finally:
        connection.close()


def delete_queue(url: str, queue: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        connection.channel().queue_delete(queue)
    finally:
        connection.close()


def publish_confirmed(url: str, queue: str, n: int) -> float:
    """Publish n messages one at a time, each confirmed before the next; returns publishes/s."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        started = time.perf_counter()
        for _ in range(n):
            channel.basic_publish("", queue, BODY)
        return n / max(time.perf_counter() - started, 1e-9)
    finally:
        connection.close()


def consume_in_processes(consume: Any, args: tuple[Any, ...], count: int) -> float:
    """Run ``consume(*args, count // PROCESSES, out)`` in PROCESSES spawned processes and
    return the sum of the rates they put on ``out``."""
    context = multiprocessing.get_context("spawn")
    out: Any = context.Queue()
    procs = [context.Process(target=consume, args=(*args, count // PROCESSES, out)) for _ in range(PROCESSES)]
    for proc in procs:
        proc.start()
    rates = [out.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
    return float(sum(rates))


def measure(url: str, prefetch: int, n: int, queue: str = QUEUE) -> float:
    """Combined deliveries/s of PROCESSES bare consumers with ``prefetch``, on n messages."""
    fresh_queue(url, queue)
    try:
        publish_confirmed(url, queue, n)
        return consume_in_processes(_consume, (url, queue, prefetch), n)
    finally:
        delete_queue(url, queue)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("-n", type=int, default=6000)
    parser.add_argument("--ack-groups", help="e.g. 1,2,4: compare acking in groups of these sizes")
    parser.add_argument("--prefetch", type=int, default=4, help="with --ack-groups (default 4)")
    parser.add_argument("--rounds", type=int, default=4, help="with --ack-groups (default 4)")
    parser.add_argument("--server-pid", type=int, help="with --ack-groups: the node's beam.smp")
    args = parser.parse_args()
    if args.ack_groups:
        groups = [int(g) for g in args.ack_groups.split(",")]
        print(
            json.dumps(measure_groups(args.url, groups, args.prefetch, args.n, args.rounds, args.server_pid))
        )
        return
    print(json.dumps({str(p): measure(args.url, p, args.n) for p in (1, 4)}))


if __name__ == "__main__":
    main()
