"""Unique tasks as the brokers see them.

A message sent as unique carries a ``uq`` header ``[key, for, running]``:

* ``key`` names the task's unique key (computed at send by :mod:`potatoq.unique`);
* ``for`` is a number of seconds after which the key is released whatever happens (a
  backstop), or None;
* ``running`` is 1 when the key stays held while the task runs, 0 when the claim releases
  it (``states=("waiting", "scheduled")``).

At enqueue the broker checks, in the same atomic step as the insert, whether a task
holding the key is still waiting, scheduled or (``running``) running. If one is, the new
message is not stored and :meth:`~potatoq.message.Message.mark_duplicate` records the
holder's id on it; the app then returns the holder's ``AsyncResult``. The key is held *by
the task itself* (its row, job hash or store entry), so whatever removes the task (settle,
dead-letter, revoke, purge, expiry, recovery's dead-lettering) releases the key in that
same step, and a killed worker can't leave it behind: recovery puts the same task back,
still holding its key. A retry keeps the key (it is the same task).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..exceptions import InvalidName, MessageDecodeError
from ..message import Message

__all__ = [
    "HEADER",
    "UNIQUE_KEY_MAX",
    "UniqueSpec",
    "unique_columns",
    "unique_columns_raw",
    "unique_of",
    "unique_of_raw",
    "validate_unique",
]

HEADER = "uq"
UNIQUE_KEY_MAX = 300


@dataclasses.dataclass(frozen=True, slots=True)
class UniqueSpec:
    """What a unique message's ``uq`` header says."""

    key: str
    seconds: float | None  # the backstop: the key is released this long after the send
    running: bool  # the key stays held while the task runs


def validate_unique(key: object, seconds: object) -> tuple[str, float | None]:
    """Check a unique key and its ``unique_for`` before they reach SQL, Lua or a header."""
    if not isinstance(key, str) or not key or len(key) > UNIQUE_KEY_MAX:
        raise InvalidName(
            f"unique key must be a non-empty string of at most {UNIQUE_KEY_MAX} characters, got {key!r:.80}"
        )
    if seconds is None:
        return key, None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise ValueError(
            f"unique_for of {key!r} must be a positive number of seconds or None, got {seconds!r}"
        )
    return key, float(seconds)


def unique_of(headers: Mapping[str, Any]) -> UniqueSpec | None:
    """The unique key a message's headers carry, or None when it isn't unique."""
    value = headers.get(HEADER)
    if not value:
        return None
    key, seconds, running = value
    return UniqueSpec(str(key), None if seconds is None else float(seconds), bool(running))


def unique_of_raw(raw: bytes) -> UniqueSpec | None:
    """The unique key an encoded payload carries (None for none, or for a payload that
    can't be decoded: it is stored without a key)."""
    if b'"uq":[' not in raw:  # payloads of plain tasks are never decoded
        return None
    try:
        return unique_of(Message.decode(raw).headers)
    except (MessageDecodeError, TypeError, ValueError):
        return None


def unique_columns(headers: Mapping[str, Any], now: float) -> dict[str, Any]:
    """``{"unique_key", "unique_until", "unique_running"}`` for a database row (all None
    when the message isn't unique); ``unique_until`` is epoch seconds or None."""
    spec = unique_of(headers)
    if spec is None:
        return {"unique_key": None, "unique_until": None, "unique_running": None}
    until = None if spec.seconds is None else now + spec.seconds
    return {"unique_key": spec.key, "unique_until": until, "unique_running": int(spec.running)}


def unique_columns_raw(raw: bytes, now: float) -> dict[str, Any]:
    """:func:`unique_columns` of an encoded payload (a dead letter being retried)."""
    spec = unique_of_raw(raw)
    if spec is None:
        return {"unique_key": None, "unique_until": None, "unique_running": None}
    until = None if spec.seconds is None else now + spec.seconds
    return {"unique_key": spec.key, "unique_until": until, "unique_running": int(spec.running)}
