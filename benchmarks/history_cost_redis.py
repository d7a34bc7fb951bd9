"""What task history costs a Redis worker, counted in CPU (issue 31's 5 % target):

    python -m benchmarks.history_cost_redis [--port 6395] [--chunks 20] [--chunk 500]
                                            [--append-calls 100] [--runs 1]

Wall time on this project's shared 2-core VM swings by more than history costs; CPU time
is steadier, and counting the Redis server's CPU beside the worker's also sees what the
``history_append.lua`` call costs the server, which a worker's own CPU doesn't. So this
starts a private ``redis-server`` (``--port``, no persistence; stopped at the end) and
measures two things:

* **loop**: one process settling and claiming no-op tasks (``settle_and_claim`` with
  ``Complete()``, no result stored: the worker's hot path), in chunks of ``--chunk``
  tasks, history on and off alternating (two brokers on the same server, each its own
  key prefix). A chunk's cost is this process's CPU time plus the server's ``INFO cpu``
  (``used_cpu_sys + used_cpu_user``), per task, the chunk's final history flush
  included; enqueueing the chunk is not counted. Reported: the medians, and the paired
  median of on - off (chunk by chunk).
* **append**: the server alone, ``--append-calls`` ``history_append`` calls of 32 compact
  records as a worker sends them (the same arguments: rollups included), ``INFO cpu``
  around them, per record; median of 9 such batches.
* **rollup build** (code that builds the charts' rollups from the stream, off the settle
  path: ``history_rollup_build.lua``): the server's CPU per record to roll up as many
  records as the append measure wrote; median of 9. Neither the loop nor the append
  counts it: add it to both to compare with code that builds them on settle.

``make bench-history-cost`` runs it. To measure another checkout's code, run it by its
path with ``PYTHONPATH`` set to that checkout (it imports ``potatoq`` from there; ``-m``
would put this checkout first), alternating with this one for a before/after::

    PYTHONPATH=../before .venv/bin/python benchmarks/history_cost_redis.py --runs 1
    PYTHONPATH=. .venv/bin/python benchmarks/history_cost_redis.py --runs 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, Complete, HistorySettings, WorkerRef
from potatoq.message import Message, new_id

WORKER = WorkerRef("bench-node", os.getpid())
QUEUE = "hcost"


@contextmanager
def private_server(port: int) -> Iterator[str]:
    """A ``redis-server`` of this run's own on ``port`` (no persistence); its URL."""
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        url = f"redis://127.0.0.1:{port}/0"
        try:
            client = redis.Redis.from_url(url)
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.exceptions.ConnectionError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise
                    time.sleep(0.05)
            client.close()
            yield url
        finally:
            server.terminate()
            server.wait(10)


def server_cpu(client: redis.Redis[bytes]) -> float:
    """The server's CPU seconds so far (``INFO cpu``: system + user)."""
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _broker(url: str, history: bool) -> object:
    prefix = f"hcost:{uuid.uuid4().hex[:8]}"
    settings = HistorySettings(enabled=history)
    return create_broker(
        BrokerConfig(url=url, transport_options={"global_keyprefix": prefix}, history=settings)
    )


def _messages(n: int) -> list[Message]:
    now = time.time()
    return [
        Message(id=new_id(), task="bench.noop", queue=QUEUE, args=(i,), headers={"sent_at": now})
        for i in range(n)
    ]


def chunk_cost(broker: object, client: redis.Redis[bytes], n: int) -> tuple[float, float]:
    """µs of CPU per task to settle-and-claim ``n`` tasks: (this process, the server)."""
    broker.enqueue(_messages(n))  # type: ignore[attr-defined]
    delivery = broker.claim([QUEUE], WORKER)  # type: ignore[attr-defined]
    cpu0, srv0 = time.process_time(), server_cpu(client)
    done = 0
    while delivery is not None:
        _, delivery = broker.settle_and_claim(delivery, Complete(), [QUEUE], WORKER)  # type: ignore[attr-defined]
        done += 1
    broker.flush_history()  # type: ignore[attr-defined]
    mine, server = time.process_time() - cpu0, server_cpu(client) - srv0
    assert done == n, (done, n)
    return mine / n * 1e6, server / n * 1e6


def loop(url: str, chunks: int, size: int) -> tuple[float, float, float, float]:
    """Medians, µs per task: on, off, paired on - off, and of that the server's share
    (the paired median of the server's on - off)."""
    client = redis.Redis.from_url(url)
    on, off = _broker(url, True), _broker(url, False)
    chunk_cost(on, client, size)  # warm up: scripts loaded, connections open
    chunk_cost(off, client, size)
    ons: list[tuple[float, float]] = []
    offs: list[tuple[float, float]] = []
    for i in range(chunks):
        order = (on, off) if i % 2 == 0 else (off, on)
        got = {id(b): chunk_cost(b, client, size) for b in order}
        ons.append(got[id(on)])
        offs.append(got[id(off)])
        client.flushdb()  # the stream doesn't grow run to run
    for b in (on, off):
        b.close()  # type: ignore[attr-defined]
    client.close()
    total_on, total_off = [sum(c) for c in ons], [sum(c) for c in offs]
    paired = statistics.median(a - b for a, b in zip(total_on, total_off, strict=True))
    server = statistics.median(a[1] - b[1] for a, b in zip(ons, offs, strict=True))
    return statistics.median(total_on), statistics.median(total_off), paired, server


def _append_command(url: str) -> tuple[object, tuple[object, ...], int]:
    """A history-on broker, the ``history_append`` call of 32 compact records as a worker
    sends it, and 32."""
    from potatoq.brokers.history_compact import for_settle_compact

    broker = _broker(url, True)
    broker.enqueue(_messages(32))  # type: ignore[attr-defined]
    records = []
    for _ in range(32):
        delivery = broker.claim([QUEUE], WORKER)  # type: ignore[attr-defined]
        assert delivery is not None
        records.append(for_settle_compact(delivery, Complete(), time.time(), HistorySettings()))
    return broker, broker._history_commands(records)[0], len(records)  # type: ignore[attr-defined]


def append(url: str, calls: int) -> float:
    """Median µs of server CPU per record of ``history_append`` calls of 32 compact records."""
    client = redis.Redis.from_url(url)
    broker, command, size = _append_command(url)
    client.execute_command(*command)  # loaded (the broker loaded it) and warm
    per_record = []
    for _ in range(9):
        pipe = client.pipeline(transaction=False)
        for _ in range(calls):
            pipe.execute_command(*command)
        before = server_cpu(client)
        pipe.execute()
        per_record.append((server_cpu(client) - before) / (calls * size) * 1e6)
        client.flushdb()
    broker.close()  # type: ignore[attr-defined]
    client.close()
    return statistics.median(per_record)


def build(url: str, calls: int) -> float | None:
    """Median µs of server CPU per record of ``history_rollup_build`` calls (the rollups
    built from the stream, off the settle path) after ``calls`` appends of 32 compact
    records; None when the code measured has no such script (it builds them on settle)."""
    from potatoq.brokers.redis.scripts import SCRIPTS

    if "history_rollup_build" not in SCRIPTS:
        return None
    client = redis.Redis.from_url(url)
    broker, command, size = _append_command(url)
    per_record = []
    for _ in range(9):
        pipe = client.pipeline(transaction=False)
        for _ in range(calls):
            pipe.execute_command(*command)
        pipe.execute()
        before = server_cpu(client)
        rolled = broker.roll_up_history(calls=10**6)  # type: ignore[attr-defined]
        per_record.append((server_cpu(client) - before) / rolled * 1e6)
        assert rolled == calls * size, rolled
        client.flushdb()
    broker.close()  # type: ignore[attr-defined]
    client.close()
    return statistics.median(per_record)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=6395)
    parser.add_argument("--chunks", type=int, default=20, help="chunks with history on (as many off)")
    parser.add_argument("--chunk", type=int, default=500, help="tasks per chunk")
    parser.add_argument(
        "--append-calls", type=int, default=100, help="history_append calls per batch (0: skip)"
    )
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    import potatoq

    print(f"potatoq from {os.path.dirname(potatoq.__file__)}; load {os.getloadavg()[0]:.1f}", flush=True)
    with private_server(args.port) as url:
        for run in range(args.runs):
            stamp = time.strftime("%H:%M:%S", time.gmtime())
            on, off, paired, server = loop(url, args.chunks, args.chunk)
            line = (
                f"{stamp} UTC load {os.getloadavg()[0]:.1f}: loop on {on:.1f} off {off:.1f} µs/task,"
                f" paired on-off {paired:+.1f} µs ({paired / off * 100:+.1f} %; server {server:+.1f})"
            )
            if args.append_calls:
                line += f"; append {append(url, args.append_calls):.2f} µs/record (server)"
                built = build(url, args.append_calls)
                if built is not None:
                    line += f"; rollup build {built:.2f} µs/record (server)"
            print(f"run {run + 1}: {line}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
