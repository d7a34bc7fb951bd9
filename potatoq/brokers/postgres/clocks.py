"""Per-process pacing state of the PostgreSQL broker: when to promote due scheduled tasks,
when to sweep, and the sleep of a worker that polls instead of listening (``notify=False``)."""

from __future__ import annotations

import threading
import time

PROMOTE_BATCH = 1000  # scheduled tasks made ready per statement
SWEEP_EVERY = 60.0  # seconds between housekeeping sweeps, per process
# shortest sleep until a due time: the server may see a due time a hair later than we do
DUE_SLACK = 0.001


class PromotionClock:
    """When this process last promoted due scheduled tasks, and when it must again.

    Promotion is timed only (every ``poll_interval``, from ``wait`` or alongside a claim),
    never before each claim of an idle worker: a worker woken by a NOTIFY claims with one
    plain statement. A pipelined promote in front of that claim cost twice its CPU and
    round-trip time on the path from enqueue to start, and an idle worker's ``wait``
    promotes on the same timetable anyway.

    The timetable is also cut short by due times: each promotion says when the earliest
    task still scheduled falls due (:meth:`promoted`), and a 'due' announcement of a task
    enqueued since (:meth:`expect_now`) makes the next promotion due at once, to learn its
    due time. So an idle worker sleeps until the next task is due, not until the next tick.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._next = 0.0  # monotonic time the next promotion is due

    def timed_due(self) -> bool:
        with self._lock:
            return time.monotonic() >= self._next

    def until_due(self) -> float:
        with self._lock:
            return max(0.0, self._next - time.monotonic())

    def promoted(self, count: int, next_due: float | None = None) -> None:
        """After a promotion that made ``count`` tasks ready; ``next_due``: seconds until the
        earliest task still scheduled falls due (None: none is)."""
        wait = self.interval
        if count >= PROMOTE_BATCH:  # a full batch means more are due: promote again at the next chance
            wait = 0.0
        elif next_due is not None:
            wait = min(wait, max(next_due, DUE_SLACK))
        with self._lock:
            self._next = time.monotonic() + wait

    def due_within(self, seconds: float) -> None:
        """A task was scheduled ``seconds`` from now here (waiting for a rate token)."""
        with self._lock:
            self._next = min(self._next, time.monotonic() + max(seconds, DUE_SLACK))

    def expect_now(self) -> None:
        """A task falling due soon was enqueued elsewhere: promote (and learn when) at once."""
        with self._lock:
            self._next = 0.0


class SweepClock:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0.0

    def take(self) -> bool:
        with self._lock:
            now = time.monotonic()
            if now < self._next:
                return False
            self._next = now + SWEEP_EVERY
            return True


class Poller:
    """Sleeps of ``notify=False`` mode, cut short by :meth:`interrupt`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._interrupts = 0

    def sleep(self, seconds: float) -> None:
        with self._cond:
            seen = self._interrupts
            self._cond.wait_for(lambda: self._interrupts != seen, timeout=seconds)

    def interrupt(self) -> None:
        with self._cond:
            self._interrupts += 1
            self._cond.notify_all()
