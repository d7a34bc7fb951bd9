"""Per-process rate limits (``rate_limit="10/s"``), a token bucket per task name."""

from __future__ import annotations

import threading
import time

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


class RateLimiter:
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
