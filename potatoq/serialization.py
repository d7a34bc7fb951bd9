"""The one codec seam: compact JSON with tagged extension types. Never pickle.

``datetime``, ``date``, ``time``, ``UUID``, ``Decimal``, ``bytes`` and ``tuple`` round-trip
through ``{"__pq__": tag, "v": value}`` objects. Anything else that JSON can't hold fails at
encode time with a :class:`SerializationError` naming where the value sits, so a bad argument
is reported by ``.delay()`` in the caller, never by a worker later.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from .exceptions import SerializationError

TAG = "__pq__"


def _timedelta(value: Any) -> dt.timedelta:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"seconds must be a number, not {type(value).__name__}")
    return dt.timedelta(seconds=value)


def _uuid(value: Any) -> uuid.UUID:
    if not isinstance(value, str):
        raise TypeError(f"must be a string, not {type(value).__name__}")
    return uuid.UUID(value)


def _decimal(value: Any) -> Decimal:
    # Decimal() also takes ints, floats and tuples; the encoder only ever writes str().
    if not isinstance(value, str):
        raise TypeError(f"must be a string, not {type(value).__name__}")
    try:
        return Decimal(value)
    except InvalidOperation:  # its message is only the signal's class
        raise ValueError("not a decimal number") from None


def _base64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"must be a string, not {type(value).__name__}")
    return base64.b64decode(value, validate=True)


def _sequence(kind: Callable[[list[Any]], Any]) -> Callable[[Any], Any]:
    def decode(value: Any) -> Any:
        if not isinstance(value, list):
            raise TypeError(f"must be a JSON list, not {type(value).__name__}")
        return kind(value)

    return decode


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "dt": dt.datetime.fromisoformat,
    "d": dt.date.fromisoformat,
    "t": dt.time.fromisoformat,
    "td": _timedelta,
    "u": _uuid,
    "dec": _decimal,
    "b": _base64,
    "tup": _sequence(tuple),
    "set": _sequence(set),
}

# What a tag's decoder raises for a value it can't take (Decimal's InvalidOperation is an
# ArithmeticError, a timedelta out of range an OverflowError).
_BAD_VALUE = (ValueError, TypeError, ArithmeticError, binascii.Error)


def _tag(obj: Any) -> Any:
    """Turn one non-JSON value into its tagged form (called by ``json`` for unknown types)."""
    if isinstance(obj, dt.datetime):
        return {TAG: "dt", "v": obj.isoformat()}
    if isinstance(obj, dt.date):
        return {TAG: "d", "v": obj.isoformat()}
    if isinstance(obj, dt.time):
        return {TAG: "t", "v": obj.isoformat()}
    if isinstance(obj, dt.timedelta):
        return {TAG: "td", "v": obj.total_seconds()}
    if isinstance(obj, uuid.UUID):
        return {TAG: "u", "v": str(obj)}
    if isinstance(obj, Decimal):
        return {TAG: "dec", "v": str(obj)}
    if isinstance(obj, bytes | bytearray | memoryview):
        return {TAG: "b", "v": base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, set | frozenset):
        return {TAG: "set", "v": [_mark_tuples(x) for x in obj]}
    to_json = getattr(obj, "__json__", None)
    if callable(to_json):
        return to_json()
    raise TypeError(f"{type(obj).__module__}.{type(obj).__qualname__}")


# Values that can hold no tuple: returned as they are, before any isinstance() walk (most
# of a message's fields are these).
_LEAVES = frozenset({str, int, float, bool, type(None)})


def _mark_tuples(obj: Any) -> Any:
    """``json`` turns tuples into lists before ``default`` sees them; tag them first."""
    if type(obj) in _LEAVES:
        return obj
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return {TAG: "tup", "v": [_mark_tuples(x) for x in obj]}
    if isinstance(obj, list):
        return [x if type(x) in _LEAVES else _mark_tuples(x) for x in obj]
    if isinstance(obj, dict):
        return {k: v if type(v) in _LEAVES else _mark_tuples(v) for k, v in obj.items()}
    return obj


def _untag(obj: dict[str, Any]) -> Any:
    tag = obj.get(TAG)
    if tag is None or len(obj) != 2 or "v" not in obj:
        return obj
    decoder = _DECODERS.get(tag) if isinstance(tag, str) else None
    if decoder is None:
        raise ValueError(f"unknown type tag {tag!r:.40}")
    try:
        return decoder(obj["v"])
    except _BAD_VALUE as exc:
        raise ValueError(f"bad {tag!r} tagged value {preview(obj['v'])}: {exc}") from None


def preview(value: Any) -> str:
    """A short description of a decoded value, for an error message: a container's repr()
    could be megabytes long, or nested too deeply for repr() to follow."""
    if isinstance(value, list | dict):
        return f"(a JSON {'list' if isinstance(value, list) else 'object'} of {len(value)})"
    return f"{value!r:.60}"


# allow_nan=False: NaN and Infinity aren't JSON; other consumers of the wire format (and
# strict parsers) would reject what Python's json happily writes.
_encoder = json.JSONEncoder(default=_tag, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps(obj: Any, *, where: str = "value") -> str:
    """Encode ``obj`` as compact JSON text; ``where`` names it in the error."""
    try:
        return _encoder.encode(_mark_tuples(obj))
    except (TypeError, ValueError) as exc:
        reason = str(exc)
        if reason.startswith("Out of range float values"):
            reason = "NaN and Infinity aren't JSON numbers (send None or a string instead)"
        raise SerializationError(
            f"{where} can't be serialized to JSON: {reason} (potatoq sends JSON only, never pickle)"
        ) from None
    except RecursionError:
        raise SerializationError(f"{where} can't be serialized to JSON: it is nested too deeply") from None


def loads(data: str | bytes, *, finite: bool = False) -> Any:
    """Decode JSON text produced by :func:`dumps`. With ``finite``, a number that isn't
    finite (``NaN``, ``Infinity``, or one too large for a float, like ``1e999``) is a
    ``ValueError``: standard JSON has no such numbers.

    Every malformed input raises ``ValueError`` (``UnicodeDecodeError`` included), except
    nesting deeper than the interpreter can follow, which raises ``RecursionError``.
    """
    if not isinstance(data, str):  # as json.loads does for bytes
        # A JSON object in UTF-8 (what dumps() writes) starts with "{" and no NUL byte;
        # json.detect_encoding would say utf-8 for it too, only slower.
        if data[:1] == b"{" and data[1:2] != b"\x00":
            data = data.decode("utf-8", "surrogatepass")
        else:
            data = data.decode(json.detect_encoding(data), "surrogatepass")
    return (_finite_decoder if finite else _decoder).decode(data)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text:.40} is out of range (not a finite float)")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# One decoder for every call: json.loads(object_hook=...) builds a new one each time, a
# few microseconds on every message a worker claims.
_decoder = json.JSONDecoder(object_hook=_untag)
_finite_decoder = json.JSONDecoder(object_hook=_untag, parse_float=_finite_float, parse_constant=_no_constant)


def check_serializable(args: Any, kwargs: dict[str, Any], *, owner: str = "") -> None:
    """Raise a :class:`SerializationError` naming the first argument that can't be encoded
    (``owner``, e.g. "task 'proj.add'", says whose argument it is)."""
    of = f" of {owner}" if owner else ""
    for i, value in enumerate(args):
        dumps(value, where=f"argument {i} ({type(value).__name__}){of}")
    for name, value in kwargs.items():
        dumps(value, where=f"keyword argument {name!r} ({type(value).__name__}){of}")
