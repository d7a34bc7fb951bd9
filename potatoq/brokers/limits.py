"""Cluster-wide concurrency limits as the brokers see them.

A message that is subject to a limit carries it in its ``cl`` header as ``[key, max]``:
``key`` names the limit (a task name, or ``name[key]`` for a per-key limit computed at
enqueue) and ``max`` is how many tasks of that key may run at once across every worker.
The app writes the header (:mod:`potatoq.limits`); a broker only reads it at enqueue, stores
the key and max next to the task and enforces them in its claim: the slot is the running
task itself, so it is given back by whatever ends the run (settle, recovery, reap) in the
same atomic step, and a killed worker can't leak one. A limit set at run time
(:meth:`Broker.set_limit`) overrides the ``max`` the messages carry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..exceptions import InvalidName, MessageDecodeError
from ..message import Message

__all__ = [
    "HEADER",
    "LIMIT_KEY_MAX",
    "RATE_HEADER",
    "LimitUsage",
    "RateUsage",
    "concurrency_of",
    "concurrency_of_raw",
    "format_rate",
    "gcra_next",
    "limit_columns",
    "parse_rate",
    "rate_columns",
    "rate_of",
    "rate_of_raw",
    "rate_usage_reply",
    "rate_usage_row",
    "tokens_left",
    "usage_row",
    "validate_limit",
    "validate_rate",
]

HEADER = "cl"
LIMIT_KEY_MAX = 300


@dataclasses.dataclass(frozen=True, slots=True)
class LimitUsage:
    """One concurrency limit as the broker holds it: what runs now, what waits on it."""

    key: str
    limit: int | None  # the run-time override, else the largest max carried by its tasks
    running: int
    waiting: int  # ready tasks of this key (they wait while ``running >= limit``)
    override: bool  # True when ``limit`` was set at run time


def concurrency_of(headers: Mapping[str, Any]) -> tuple[str, int] | None:
    """The ``(key, max)`` a message's headers carry, or None when it has no limit."""
    value = headers.get(HEADER)
    if not value:
        return None
    key, limit = value
    return str(key), int(limit)


def validate_limit(key: str, limit: int | None) -> tuple[str, int | None]:
    """Check a limit key and value before they reach SQL, Lua or a header."""
    if not isinstance(key, str) or not key or len(key) > LIMIT_KEY_MAX:
        raise InvalidName(
            f"limit key must be a non-empty string of at most {LIMIT_KEY_MAX} characters, got {key!r:.80}"
        )
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"concurrency limit of {key!r} must be a positive integer or None, got {limit!r}")
    return key, limit


def concurrency_of_raw(raw: bytes) -> tuple[str, int] | None:
    """The limit an encoded payload carries (None for none, or for a payload that can't be
    decoded: it is still delivered, and dead-lettered, without a limit)."""
    if b'"cl":[' not in raw:  # unlimited payloads are never decoded
        return None
    try:
        return concurrency_of(Message.decode(raw).headers)
    except (MessageDecodeError, TypeError, ValueError):
        return None


def limit_columns(headers: Mapping[str, Any]) -> dict[str, Any]:
    """``{"limit_key": …, "limit_max": …}`` for a database row (both None when unlimited)."""
    found = concurrency_of(headers)
    if found is None:
        return {"limit_key": None, "limit_max": None}
    return {"limit_key": found[0], "limit_max": found[1]}


def usage_row(row: Sequence[Any]) -> LimitUsage:
    """A ``(key, limit, running, waiting, overridden)`` row read back by a SQL broker."""
    key, limit, running, waiting, overridden = row
    return LimitUsage(
        key=str(key),
        limit=None if limit is None else int(limit),
        running=int(running or 0),
        waiting=int(waiting or 0),
        override=bool(overridden),
    )


# -- global rate limits ---------------------------------------------------------------------
#
# A message under a rate limit carries ``rl: [key, per_second, burst]``. The broker keeps
# one GCRA state per key, its "theoretical arrival time" ``tat``: a claim of the key takes a
# token when ``now >= tat - (burst - 1) * interval`` (``interval = 1 / per_second``), and
# moves ``tat`` to ``max(tat, now) + interval``. So at most ``burst`` start at once, and in
# any window of ``W`` seconds at most ``burst + W * per_second``. A ready task whose key has
# no token is not delivered: the claim puts it back as a scheduled task at the time its
# token is expected (tasks of one key are spread one interval apart), where the broker's
# usual wake-up for due tasks finds it; its delivery count doesn't change.

RATE_HEADER = "rl"
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


@dataclasses.dataclass(frozen=True, slots=True)
class RateUsage:
    """One rate limit as the broker holds it: tokens left now, tasks waiting on it."""

    key: str
    rate: float | None  # tasks per second: the run-time override, else what its tasks carry
    burst: int | None
    tokens: float  # tokens left now (``burst`` when idle)
    waiting: int  # tasks of this key not yet delivered (ready, or waiting for their token)
    override: bool


def format_rate(per_second: float | None) -> str:
    """Tasks per second as the shortest of ``N/s``, ``N/m``, ``N/h`` (the inverse of
    :func:`parse_rate`, for the CLI and the dashboard)."""
    if per_second is None:
        return "-"
    if per_second >= 1:
        return f"{per_second:g}/s"
    if per_second * 60 >= 1:
        return f"{per_second * 60:g}/m"
    return f"{per_second * 3600:g}/h"


def parse_rate(rate: str | float | int, what: str = "rate limit") -> float:
    """``"100/s"``, ``"20/m"``, ``"500/h"`` (or a number of tasks per second) -> per second."""
    if isinstance(rate, bool):
        raise ValueError(f"{what} must look like '100/s', '20/m' or '500/h', got {rate!r}")
    if isinstance(rate, int | float):
        value = float(rate)
    else:
        text = str(rate).strip()
        count, _, unit = text.partition("/")
        try:
            value = float(count) / _UNITS[unit.strip() or "s"]
        except (KeyError, ValueError):
            raise ValueError(f"{what} must look like '100/s', '20/m' or '500/h', got {rate!r}") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{what} must be more than 0 tasks per second, got {rate!r}")
    return value


def validate_rate(
    key: str, per_second: str | float | None, burst: int | None
) -> tuple[str, float | None, int]:
    """Check a rate key, rate and burst before they reach SQL, Lua or a header."""
    validate_limit(key, None)
    rate = None if per_second is None else parse_rate(per_second, f"rate limit of {key!r}")
    if burst is None:
        burst = 1
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
        raise ValueError(f"rate burst of {key!r} must be a positive integer, got {burst!r}")
    return key, rate, burst


def rate_of(headers: Mapping[str, Any]) -> tuple[str, float, int] | None:
    """The ``(key, per_second, burst)`` a message's headers carry, or None."""
    value = headers.get(RATE_HEADER)
    if not value:
        return None
    key, per_second, burst = value
    return str(key), float(per_second), int(burst)


def rate_of_raw(raw: bytes) -> tuple[str, float, int] | None:
    """The rate limit an encoded payload carries (None for none or an undecodable payload)."""
    if b'"rl":[' not in raw:
        return None
    try:
        return rate_of(Message.decode(raw).headers)
    except (MessageDecodeError, TypeError, ValueError):
        return None


def rate_columns(headers: Mapping[str, Any]) -> dict[str, Any]:
    """``{"rate_key", "rate_interval", "rate_burst"}`` for a database row (None when unlimited)."""
    found = rate_of(headers)
    if found is None:
        return {"rate_key": None, "rate_interval": None, "rate_burst": None}
    return {"rate_key": found[0], "rate_interval": 1.0 / found[1], "rate_burst": found[2]}


def gcra_next(tat: float, interval: float, burst: int) -> float:
    """When the key's next token is due: a claim at ``now`` may take one if this is <= now."""
    return tat - (burst - 1) * interval


def tokens_left(tat: float, now: float, interval: float, burst: int) -> float:
    """Tokens a key has at ``now`` (0 to ``burst``; fractions are a token on its way)."""
    return max(0.0, min(float(burst), burst - max(0.0, tat - now) / interval))


def rate_usage_reply(reply_row: Sequence[Any]) -> RateUsage:
    """A row of ``rate_usage.lua``'s reply (the RabbitMQ store's scripts, also loaded by the
    Redis Cluster broker): ``(key, ms per token, burst, tat ms, waiting, overridden, now ms)``,
    values as Redis returns them (bytes or numbers)."""
    key, step, burst, tat, waiting, overridden, now = (
        value.decode() if isinstance(value, bytes) else value for value in reply_row
    )
    per_ms, count = str(step), str(burst)
    row = (
        str(key),
        1000.0 / float(per_ms) if per_ms else None,
        int(float(count)) if count else None,
        float(str(tat)) / 1000.0,
        int(waiting),
        int(overridden),
    )
    return rate_usage_row(row, int(now) / 1000.0)


def rate_usage_row(row: Sequence[Any], now: float) -> RateUsage:
    """A ``(key, per_second, burst, tat, waiting, overridden)`` row read back by a SQL broker."""
    key, per_second, burst, tat, waiting, overridden = row
    tokens = float(burst or 1)
    if per_second and tat is not None:
        tokens = tokens_left(float(tat), now, 1.0 / float(per_second), int(burst or 1))
    return RateUsage(
        key=str(key),
        rate=None if per_second is None else float(per_second),
        burst=None if burst is None else int(burst),
        tokens=tokens,
        waiting=int(waiting or 0),
        override=bool(overridden),
    )
