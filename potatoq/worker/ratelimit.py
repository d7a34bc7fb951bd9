"""Rate limits (``rate_limit="10/s"``), per worker node as Celery defines them.

Celery's rate limit holds per worker instance, shared by its pool processes: ``-c 2`` runs
the configured rate, not twice it. So the supervisor keeps the one clock per task name and
hands out the tokens (:class:`TokenDispenser`); a child asks for one over its event pipe
before it runs a rate-limited task and waits for the grant on a pipe of its own
(:class:`NodeRateLimiter`). ``-P solo`` runs in one process and uses :class:`RateLimiter`.

The pace is even (a bucket of one token, as Celery's): a task name limited to ``r`` per
second gets a token every ``1/r`` seconds across the node, the first one at once.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Limiter", "NodeRateLimiter", "RateLimiter", "TokenDispenser", "parse_rate"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_rate(rate: str | float | int) -> float:
    """Tasks per second for ``"10/s"``, ``"100/m"``, ``"1000/h"`` or a number (per second)."""
    if isinstance(rate, int | float):
        return float(rate)
    text = str(rate).strip()
    if "/" in text:
        count, unit = text.split("/", 1)
        unit = unit.strip()[:1].lower()
        if unit not in _UNITS:
            raise ValueError(f"rate limit {rate!r}: the unit must be s, m or h")
        return float(count) / _UNITS[unit]
    return float(text)


class Limiter(Protocol):
    def acquire(self, name: str, rate: str | float | int) -> None:
        """Block until task ``name`` may start under ``rate``."""


class RateLimiter:
    """The limit within one process (``-P solo``): a token bucket of one per task name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, last refill)

    def acquire(self, name: str, rate: str | float | int) -> None:
        """Block until a token for ``name`` is free (burst of one: an even pace)."""
        per_second = parse_rate(rate)
        if per_second <= 0:
            return
        while True:
            with self._lock:
                now = time.monotonic()
                tokens, last = self._buckets.get(name, (1.0, now))
                tokens = min(1.0, tokens + (now - last) * per_second)
                if tokens >= 1.0:
                    self._buckets[name] = (tokens - 1.0, now)
                    return
                self._buckets[name] = (tokens, now)
                wait = (1.0 - tokens) / per_second
            time.sleep(wait)


class TokenDispenser:
    """(supervisor) When each requested token is granted: one clock per task name.

    A request gets the first free slot of its task name (now, or ``1/rate`` after the
    previous grant), so requests are granted in order at an even pace.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._next_free: dict[str, float] = {}
        self._pending: list[tuple[float, int, int, int]] = []  # (due, order, child pid, request id)
        self._order = itertools.count()

    def request(self, pid: int, request_id: int, name: str, per_second: float) -> None:
        now = self.clock()
        due = now if per_second <= 0 else max(now, self._next_free.get(name, now))
        if per_second > 0:
            self._next_free[name] = due + 1.0 / per_second
        heapq.heappush(self._pending, (due, next(self._order), pid, request_id))

    def due(self) -> list[tuple[int, int]]:
        """The (child pid, request id) pairs whose token is due now."""
        now = self.clock()
        granted = []
        while self._pending and self._pending[0][0] <= now:
            _, _, pid, request_id = heapq.heappop(self._pending)
            granted.append((pid, request_id))
        return granted

    def next_due(self) -> float | None:
        return self._pending[0][0] if self._pending else None


class NodeRateLimiter:
    """(child) Asks the supervisor for each token and waits for the grant.

    ``send(request_id, name, per_second)`` writes the request to the event pipe; grants
    arrive as ``request_id`` lines on ``grants_fd``, read by one thread that wakes the
    waiting task thread. If the supervisor is gone (end of file), every wait ends: the
    child is about to be stopped anyway, and the limit falls back to this process alone.
    """

    def __init__(self, send: Callable[[int, str, float], None], grants_fd: int) -> None:
        self._send = send
        self._fd = grants_fd
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, threading.Event] = {}
        self._reader: threading.Thread | None = None
        self._closed = False
        self._fallback = RateLimiter()

    def acquire(self, name: str, rate: str | float | int) -> None:
        per_second = parse_rate(rate)
        if per_second <= 0:
            return
        granted = threading.Event()
        with self._lock:
            if self._closed:
                fallback = True
            else:
                fallback = False
                request_id = next(self._ids)
                self._waiting[request_id] = granted
                if self._reader is None:
                    self._reader = threading.Thread(
                        target=self._read_grants, name="potatoq-rate-grants", daemon=True
                    )
                    self._reader.start()
        if fallback:
            self._fallback.acquire(name, per_second)
            return
        self._send(request_id, name, per_second)
        granted.wait()

    def _read_grants(self) -> None:
        tail = b""
        while True:
            try:
                chunk = os.read(self._fd, 4096)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                break
            tail += chunk
            *lines, tail = tail.split(b"\n")
            with self._lock:
                for line in lines:
                    if event := self._waiting.pop(int(line), None):
                        event.set()
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, {}
        for event in waiting.values():
            event.set()
        with contextlib.suppress(OSError):
            os.close(self._fd)
