"""The producer side of a benchmark, run by ``benchmarks.run`` as a subprocess inside the
measured system's own virtualenv (so only the standard library and that system are
imported here)::

    python -m benchmarks.drive enqueue MODULE N [--batch B] [--countdown S]
    python -m benchmarks.drive latency MODULE SAMPLES SECONDS [--gap-ms MIN,MAX]
    python -m benchmarks.drive eta MODULE SAMPLES SECONDS [--countdown MIN,MAX] [--gap-ms MIN,MAX]
    python -m benchmarks.drive version DISTRIBUTION

``enqueue`` sends N ``noop`` tasks (one ``send`` call each, or ``send_many`` calls of B)
and prints the seconds it took. ``latency`` sends ``stamp`` tasks one at a time, each only
after the previous one has started and a short random pause has let the workers go idle
again (uniform in MIN..MAX ms, default 5..40); it stops after SAMPLES tasks or SECONDS,
whichever comes first. ``eta`` does the same with ``stamp`` tasks sent with a countdown
(uniform in MIN..MAX s, default 1 s) through the module's ``send_later``, each stamped with
its due time, so that it records how late it started after it was due; the pause between
samples (default 0..1000 ms) puts the due times at every phase of any periodic timer. All
three first call the system's ``prepare()`` where its module has one
(importing what its first send would import lazily, without connecting), so that import
time is neither in a rate nor in a latency sample. ``enqueue`` then calls the module's
``setup()`` where it has one (tasks the run needs beside the measured ones), before the
clock starts.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import random
import time
from types import ModuleType

from . import record

STALL_SECONDS = 10


def enqueue(module_name: str, n: int, batch: int, countdown: float | None) -> None:
    module = importlib.import_module(module_name)
    _prepare(module)
    setup = getattr(module, "setup", None)  # tasks the run needs beside the measured ones
    if setup is not None:
        setup()
    started = time.perf_counter()
    if batch > 1 or countdown is not None:
        options = {} if countdown is None else {"countdown": countdown}
        for first in range(0, n, batch):
            module.send_many("noop", [(i,) for i in range(first, min(n, first + batch))], **options)
    else:
        for i in range(n):
            module.send("noop", i)
    print(f"{time.perf_counter() - started:.6f}")


def _prepare(module: object) -> None:
    """Import what the system imports lazily on its first send (a client library, say), so
    that the rates measure sending and not importing. Opens no connection."""
    prepare = getattr(module, "prepare", None)
    if prepare is not None:
        prepare()


def latency(module_name: str, samples: int, seconds: float, gap_ms: tuple[float, float]) -> None:
    module = importlib.import_module(module_name)
    _prepare(module)
    path = os.environ[record.STARTED_ENV]
    rng = random.Random(7)
    _warm_up(module)
    stop = time.monotonic() + seconds
    fifo_path = os.environ.get(record.STARTED_FIFO_ENV)
    fifo = record.open_started_fifo(fifo_path) if fifo_path else None
    for i in range(samples):
        module.send("stamp", time.time())
        deadline = time.monotonic() + STALL_SECONDS
        while record.count_started(path) <= i:
            if time.monotonic() > deadline:
                raise SystemExit(f"a task sent into the idle worker didn't start within {STALL_SECONDS} s")
            if fifo is None:
                time.sleep(0.0002)
            else:
                record.wait_started(fifo, 0.05)
        if time.monotonic() > stop:
            break
        time.sleep(rng.uniform(*gap_ms) / 1000)  # idle again, at no fixed phase of any poll loop


def eta(
    module_name: str,
    samples: int,
    seconds: float,
    countdown: tuple[float, float],
    gap_ms: tuple[float, float],
) -> None:
    module = importlib.import_module(module_name)
    _prepare(module)
    path = os.environ[record.STARTED_ENV]
    rng = random.Random(11)
    _warm_up(module)
    stop = time.monotonic() + seconds
    fifo = record.open_started_fifo(os.environ[record.STARTED_FIFO_ENV])
    for i in range(samples):
        delay = rng.uniform(*countdown)
        module.send_later("stamp", delay, time.time() + delay)
        deadline = time.monotonic() + delay + STALL_SECONDS
        while record.count_started(path) <= i:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"a task due in {delay:.3f} s didn't start within {STALL_SECONDS} s of its due time"
                )
            record.wait_started(fifo, 0.05)
        if time.monotonic() > stop:
            break
        time.sleep(rng.uniform(*gap_ms) / 1000)


def _pair(text: str) -> tuple[float, float]:
    low, high = (float(x) for x in text.split(","))
    return low, high


def _warm_up(module: ModuleType) -> None:
    """Send one ``noop`` and wait for it to run, so that the first sample doesn't include
    the connection this process opens on its first send (a TCP connect and authentication:
    10-20 ms on PostgreSQL here, in one sample of every round, enough to move a p99)."""
    done_path = os.environ[record.DONE_ENV]
    before = record.count_done(done_path)
    module.send("noop", -1)
    deadline = time.monotonic() + STALL_SECONDS
    while record.count_done(done_path) <= before:
        if time.monotonic() > deadline:
            raise SystemExit(f"the warm-up task didn't run within {STALL_SECONDS} s")
        time.sleep(0.001)
    time.sleep(0.05)  # idle again before the first sample


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("enqueue")
    p.add_argument("module")
    p.add_argument("n", type=int)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--countdown", type=float, default=None)
    p = sub.add_parser("latency")
    p.add_argument("module")
    p.add_argument("samples", type=int)
    p.add_argument("seconds", type=float)
    p.add_argument("--gap-ms", default="5,40", help="pause between samples: uniform in MIN,MAX ms")
    p = sub.add_parser("eta")
    p.add_argument("module")
    p.add_argument("samples", type=int)
    p.add_argument("seconds", type=float)
    p.add_argument("--countdown", default="1,1", help="countdown of each task: uniform in MIN,MAX s")
    p.add_argument("--gap-ms", default="0,1000", help="pause between samples: uniform in MIN,MAX ms")
    p = sub.add_parser("version")
    p.add_argument("distribution")
    args = parser.parse_args()
    if args.command == "enqueue":
        enqueue(args.module, args.n, args.batch, args.countdown)
    elif args.command == "latency":
        latency(args.module, args.samples, args.seconds, _pair(args.gap_ms))
    elif args.command == "eta":
        eta(args.module, args.samples, args.seconds, _pair(args.countdown), _pair(args.gap_ms))
    else:
        print(importlib.metadata.version(args.distribution))


if __name__ == "__main__":
    main()
