"""What one ``broker.enqueue()`` costs in a multi-gigabyte SQLite file against an empty one.

Issue 27's paired rounds (``make bench-scale --paired``) compare wall-clock enqueue/s, which
on the shared 2-core machine swings by a factor of 2 between identical runs. This measures the cost
itself, per enqueue: the process's CPU time (SQLite runs in-process, so that is all of its
work, page reads from the OS cache included), and its read and write system calls and bytes
(``/proc/self/io``): a page-cache miss is a ``pread``, a commit's WAL frames are writes.

One run fills a database with the issue's backlog (``benchmarks.scale.fill_sqlite``: ready
and far-future delayed tasks, stored results), makes an empty twin, then, for each variant
of connection pragmas (``--variants``), opens one broker on each file with those pragmas
and measures blocks of ``--block`` one-message enqueues, empty and full alternately, for
``--blocks`` rounds (the first two dropped as warm-up). ``--evict`` asks the kernel to drop
the full file's cached pages before each variant (``posix_fadvise(DONTNEED)``, this file
only): the cold-cache case, as after a fill whose pages were evicted.

Linux only (``/proc/self/io``). Not part of CI: the default sizes need ~3 GB in the
directory and a few minutes to fill.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.scale import fill_sqlite
from benchmarks.scale_target import message
from potatoq.brokers import create_broker
from potatoq.brokers.base import Broker, BrokerConfig
from potatoq.brokers.sqlite import SQLiteBroker

VARIANTS = {
    "default": (),
    "cache16m": ("PRAGMA cache_size = -16384",),
    "cache64m": ("PRAGMA cache_size = -65536",),
    "mmap4g": ("PRAGMA mmap_size = 4294967296",),
}
COLUMNS = ("wall µs", "cpu µs", "reads", "read KiB", "writes", "write KiB")


def _io() -> tuple[int, int, int, int]:
    with open("/proc/self/io") as f:
        fields = dict(line.split(": ") for line in f.read().splitlines() if line)
    return int(fields["syscr"]), int(fields["rchar"]), int(fields["syscw"]), int(fields["wchar"])


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _block(broker: Broker, n: int) -> tuple[float, ...]:
    """Per enqueue: wall µs, CPU µs, read calls, read KiB, write calls, write KiB."""
    io0, wall0, cpu0 = _io(), time.perf_counter(), time.process_time()
    for _ in range(n):
        broker.enqueue([message("enqueue-cost")])
    wall, cpu, io1 = time.perf_counter() - wall0, time.process_time() - cpu0, _io()
    calls = [(b - a) / n for a, b in zip(io0, io1, strict=True)]
    return wall / n * 1e6, cpu / n * 1e6, calls[0], calls[1] / 1024, calls[2], calls[3] / 1024


def measure(directory: Path, variant: str, blocks: int, block: int) -> dict[str, list[tuple[float, ...]]]:
    brokers = {}
    for kind in ("empty", "full"):
        broker = create_broker(BrokerConfig(url=f"sqlite:///{directory / kind}.sqlite3"))
        assert isinstance(broker, SQLiteBroker)
        conn = broker._conn().conn  # this thread's connection: the one enqueue() uses here
        for pragma in VARIANTS[variant]:
            conn.execute(pragma)
        brokers[kind] = broker
    rows: dict[str, list[tuple[float, ...]]] = {"empty": [], "full": []}
    try:
        for i in range(blocks):
            for kind in ("empty", "full") if i % 2 == 0 else ("full", "empty"):
                rows[kind].append(_block(brokers[kind], block))
    finally:
        for broker in brokers.values():
            broker.close()
    return {kind: found[2:] for kind, found in rows.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--ready", type=int, default=1_000_000)
    parser.add_argument("--delayed", type=int, default=1_000_000)
    parser.add_argument("--results", type=int, default=10_000_000)
    parser.add_argument("--variants", default="default,cache64m,mmap4g,default,cache64m,mmap4g")
    parser.add_argument("--blocks", type=int, default=12, help="alternating blocks per variant")
    parser.add_argument("--block", type=int, default=200, help="enqueues per block")
    parser.add_argument("--evict", action="store_true", help="drop the full file's cached pages first")
    parser.add_argument("--dir", default=None, help="where the two files go (deleted after)")
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown or args.blocks < 3 or args.block < 1:
        parser.error(f"--variants from {', '.join(VARIANTS)}; --blocks ≥ 3; --block ≥ 1")
    print(f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {os.getloadavg()}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        create_broker(BrokerConfig(url=f"sqlite:///{directory / 'empty'}.sqlite3")).migrate()
        full = create_broker(BrokerConfig(url=f"sqlite:///{directory / 'full'}.sqlite3"))
        start = time.perf_counter()
        fill_sqlite(full, directory / "full.sqlite3", args.ready, args.delayed, args.results)
        full.close()
        size = (directory / "full.sqlite3").stat().st_size
        print(f"filled in {time.perf_counter() - start:.0f} s: {size / 1e9:.2f} GB")
        print(f"\nper enqueue, median of {args.blocks - 2} blocks of {args.block}\n")
        print(f"| variant | db | {' | '.join(COLUMNS)} | full ÷ empty CPU |")
        print("|---|---|" + "---:|" * (len(COLUMNS) + 1))
        for variant in variants:
            if args.evict:
                _evict(directory / "full.sqlite3")
            rows = measure(directory, variant, args.blocks, args.block)
            medians = {
                k: [statistics.median(r[c] for r in v) for c in range(len(COLUMNS))] for k, v in rows.items()
            }
            for kind in ("empty", "full"):
                cells = " | ".join(
                    f"{x:,.1f}" if c >= 2 else f"{x:,.0f}" for c, x in enumerate(medians[kind])
                )
                ratio = f"{medians['full'][1] / medians['empty'][1]:.2f}" if kind == "full" else ""
                print(f"| {variant} | {kind} | {cells} | {ratio} |", flush=True)
        print(f"\nload {os.getloadavg()}")


if __name__ == "__main__":
    main()
