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
    "LimitUsage",
    "concurrency_of",
    "concurrency_of_raw",
    "limit_columns",
    "usage_row",
    "validate_limit",
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
