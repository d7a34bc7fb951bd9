"""The SQLite write-lock probe of ``benchmarks.soak``: a process of its own that takes the
write lock again and again (``BEGIN IMMEDIATE; COMMIT``) and records how long it waited
each time. The longest wait is the longest time the lock was held by others: the longest
write transaction, plus the probe's own scheduling delay on a busy machine (measured
alone first, before the worker starts).

Beside it, the same loop on a file of its own that nothing else writes (the control): its
longest wait is the probe's own delay (the machine's scheduling), measured all along, so a
long wait on the broker's file can be told from a slow moment of the machine.

It asks without a busy timeout and tries again every millisecond, rather than through
SQLite's busy handler, whose growing sleeps (up to 100 ms) would add to the wait it
measures. It runs in a process of its own so that the harness's threads (the producer,
the sampler) don't hold the GIL while it waits.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from pathlib import Path
from typing import Any

PAUSE = 0.010  # seconds between takes: a transaction longer than this is always caught
RETRY = 0.001
LONG = 0.100  # waits longer than this are counted


def _take(conn: sqlite3.Connection) -> float:
    """Seconds waited for the write lock (then released at once)."""
    start = time.perf_counter()
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            break
        except sqlite3.OperationalError:  # locked or busy: another writer holds it
            time.sleep(RETRY)
    waited = time.perf_counter() - start
    conn.execute("COMMIT")
    return waited


def _probe(path: str, control: str, stop: Any, shared: dict[str, Any]) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    idle = sqlite3.connect(control, isolation_level=None, timeout=0)
    while not stop.is_set():
        waited = _take(conn)
        noise = _take(idle)
        with shared["window"].get_lock():
            shared["window"].value = max(shared["window"].value, waited)
            shared["control"].value = max(shared["control"].value, noise)
            if waited > LONG:
                shared["over"].value += 1
        if waited > shared["longest"].value:
            shared["longest"].value, shared["at"].value = waited, time.time()
        stop.wait(PAUSE)
    conn.close()
    idle.close()


class LockProbe:
    """Start with :meth:`start`; :meth:`window` returns (and resets) the longest wait since
    the last call, the control file's, and how many waits were over 100 ms;
    :attr:`longest` the longest of the run and when (epoch seconds)."""

    def __init__(self, path: Path) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._shared = {
            "window": ctx.Value("d", 0.0),
            "control": ctx.Value("d", 0.0),
            "over": ctx.Value("l", 0),
            "longest": ctx.Value("d", 0.0),
            "at": ctx.Value("d", 0.0),
        }
        control = path.with_name(path.name + ".control")
        self._proc = ctx.Process(
            target=_probe, args=(str(path), str(control), self._stop, self._shared), daemon=True
        )

    def start(self) -> None:
        self._proc.start()

    def window(self) -> tuple[float, float, int]:
        shared = self._shared
        with shared["window"].get_lock():
            values = (shared["window"].value, shared["control"].value, shared["over"].value)
            shared["window"].value, shared["control"].value, shared["over"].value = 0.0, 0.0, 0
        return float(values[0]), float(values[1]), int(values[2])

    @property
    def longest(self) -> tuple[float, float]:
        return float(self._shared["longest"].value), float(self._shared["at"].value)

    def reset(self) -> None:
        """Forget the longest wait so far (after the probe-alone period)."""
        self.window()
        self._shared["longest"].value, self._shared["at"].value = 0.0, 0.0

    def stop(self) -> None:
        self._stop.set()
        self._proc.join(10)
