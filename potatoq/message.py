"""The wire envelope: one versioned, compact JSON object per task message.

Layout (version 1)::

    {"v": 1, "id": "…", "task": "proj.add", "q": "default", "a": [2, 3], "k": {},
     "p": 0, "eta": 1764690000.5, "exp": null, "r": 0, "h": {…}}

``h`` (headers) carries what the executor needs beyond the call itself: parent/root/group
ids, the chain still to run, link callbacks, chord membership, per-call time limits. Brokers
never look inside ``h``; they only need ``id``, ``queue``, ``priority`` and ``eta``, which
are also top-level fields so that a broker can index them without decoding the payload.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from typing import Any

from . import serialization
from .exceptions import MessageDecodeError, SerializationError
from .utils.frozen import positional_builder

VERSION = 1


_LOW_62 = (1 << 62) - 1
_VERSION_7 = 0x7 << 76
_VARIANT = 0b10 << 62


def new_id() -> str:
    """A fresh task id: a UUID string, as Celery's, of version 7 (RFC 9562) rather than 4.

    Its first 48 bits are the Unix time in milliseconds and its other 74 free bits random
    (a UUID4 has 122): only ids made in the same millisecond can collide, and the chance
    that n of them hold a pair is about n**2 / 2**75 (3 in 10**11 for a million).
    Why not UUID4: the SQL brokers index task ids (the jobs, results and history tables),
    and random ids put each insert on a random page of those indexes: a batch of 128
    history rows dirtied about as many index pages, each written whole to the WAL. Ids sent
    in a row now sort together, so the inserts land on the last pages (issue 31: 30 % less
    CPU per history row on SQLite). Nothing reads meaning into an id: a task id passed in
    by the caller (any string) works as before.
    """
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits, of which 74 are kept
    value = (
        (time.time_ns() // 1_000_000) << 80
        | _VERSION_7
        | (rand >> 62 & 0xFFF) << 64  # rand_a: 12 bits
        | _VARIANT
        | rand & _LOW_62  # rand_b: 62 bits
    )
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """One task to run: what crosses the broker boundary on the way in."""

    id: str
    task: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    eta: float | None = None  # epoch seconds; None = run now
    expires: float | None = None  # epoch seconds; a delivery after this is dropped as REVOKED
    retries: int = 0
    headers: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The bytes of the first encode(): sending encodes each message for the size check and
    # again in the broker, so the second costs nothing. Not an init field, so
    # dataclasses.replace() starts the copy without it.
    _encoded: bytes | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    # Set by a broker's enqueue when this unique message wasn't stored because the task
    # holding its unique key is still waiting, scheduled or running (potatoq/brokers/unique.py).
    _duplicate_of: str | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    @property
    def duplicate_of(self) -> str | None:
        """The id of the task holding this unique message's key, when enqueue didn't store it."""
        return self._duplicate_of

    def mark_duplicate(self, holder_id: str) -> None:
        """Record (in a broker's enqueue) that the task ``holder_id`` holds this message's key."""
        object.__setattr__(self, "_duplicate_of", holder_id)

    def encode(self) -> bytes:
        """The message as compact UTF-8 JSON bytes (computed once, then reused)."""
        if self._encoded is not None:
            return self._encoded
        body = {
            "v": VERSION,
            "id": self.id,
            "task": self.task,
            "q": self.queue,
            "a": list(self.args),
            "k": dict(self.kwargs),
            "p": self.priority,
            "eta": self.eta,
            "exp": self.expires,
            "r": self.retries,
            "h": dict(self.headers),
        }
        try:
            encoded = serialization.dumps(body, where=f"message for task {self.task!r}").encode()
        except SerializationError:
            # Name the argument that can't be encoded, not just the message.
            serialization.check_serializable(self.args, dict(self.kwargs), owner=f"task {self.task!r}")
            raise
        object.__setattr__(self, "_encoded", encoded)
        return encoded

    def forget_encoding(self) -> None:
        """Drop the cached bytes (after something may have changed the headers in place)."""
        object.__setattr__(self, "_encoded", None)

    @classmethod
    def decode(cls, data: bytes | str, *, max_size: int | None = None) -> Message:
        """Parse bytes written by :meth:`encode`; raise :class:`MessageDecodeError` with the reason.

        Whatever ``data`` holds, nothing else escapes: a worker dead-letters the message with
        the reason and goes on. ``max_size`` refuses a larger payload before parsing it.
        """
        if max_size is not None and len(data) > max_size:
            raise MessageDecodeError(
                f"payload is {len(data)} bytes, over the {max_size}-byte limit"
                " (task_max_message_size); not decoded"
            )
        try:
            body = serialization.loads(data, finite=True)
        except ValueError as exc:  # UnicodeDecodeError and json's errors included
            raise MessageDecodeError(f"payload is not valid potatoq JSON: {exc}") from None
        except RecursionError:
            raise MessageDecodeError("payload is nested too deeply to decode") from None
        except Exception as exc:  # noqa: BLE001 - whatever the bytes are, the worker must get a reason
            raise MessageDecodeError(f"payload can't be decoded: {type(exc).__name__}: {exc}") from None
        if not isinstance(body, dict):
            raise MessageDecodeError(f"payload is a JSON {type(body).__name__}, not an object")
        version = body.get("v")
        if version != VERSION:
            raise MessageDecodeError(
                f"unknown message version {serialization.preview(version)} (this worker reads {VERSION})"
            )
        fields = (
            _str(body, "id"),
            _str(body, "task"),
            tuple(_typed(body, "a", list, [])),
            _typed(body, "k", dict, {}),
            _str(body, "q"),
            _int(body, "p"),
            _opt_float(body, "eta"),
            _opt_float(body, "exp"),
            _int(body, "r"),
            _typed(body, "h", dict, {}),
        )
        if cls is not Message:  # a subclass gets its own __init__
            return cls(*fields)
        # Every field checked above: built without the dataclass __init__ (a worker decodes
        # one message per task). The bytes decoded aren't kept as the encoding: encode()
        # writes its own canonical form.
        return _build_message(*fields, None, None)

    def replace(self, **changes: Any) -> Message:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def is_due(self, now: float | None = None) -> bool:
        return self.eta is None or self.eta <= (time.time() if now is None else now)


_build_message = positional_builder(Message)


def _str(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise MessageDecodeError(
            f"field {key!r} must be a non-empty string, got {serialization.preview(value)}"
        )
    return value


def _typed(body: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise MessageDecodeError(f"field {key!r} must be a JSON {kind.__name__}, got {type(value).__name__}")
    return value


# What a send accepts (sendchecks.PRIORITY_RANGE: PostgreSQL's integer column, the
# narrowest): a priority or retry count outside it is a forged message, which would fail
# in the broker's storage on retry.
_INT_RANGE = range(-(2**31), 2**31)


def _int(body: dict[str, Any], key: str) -> int:
    value = body.get(key)
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():  # an older encoder's 7.0
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value not in _INT_RANGE:
        raise MessageDecodeError(
            f"field {key!r} must be a 32-bit integer, got {serialization.preview(value)}"
        )
    return value


def _opt_float(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise MessageDecodeError(
            f"field {key!r} must be a number of epoch seconds or null, got {serialization.preview(value)}"
        )
    try:
        return float(value)
    except OverflowError:  # an int too large for a float
        raise MessageDecodeError(f"field {key!r} is out of range: {serialization.preview(value)}") from None
