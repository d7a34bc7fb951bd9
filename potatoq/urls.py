"""Broker URL checks made before a broker is built, and client errors told in one line.

:func:`check_broker_url` is called by the URL-scheme registry (``potatoq.brokers``), so every
broker gets the same treatment: a URL its client library would misread is refused with a
message naming the part that is wrong (e.g. redis-py reads ``redis://host/abc`` as database
0, silently).

:func:`client_error` turns an exception raised by a broker's client library (``redis``,
``psycopg``, ``pika``) into ``"ResponseError: DB index is out of range"``, for the CLI to
print instead of a traceback: such errors are about the server or the URL, not a bug here.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from .exceptions import ImproperlyConfigured
from .utils import mask_url

__all__ = ["CLIENT_LIBRARIES", "check_broker_url", "client_error"]

REDIS_SCHEMES = frozenset({"redis", "rediss", "valkey", "valkeys", "unix"})
CLIENT_LIBRARIES = frozenset({"redis", "valkey", "psycopg", "psycopg_pool", "pika", "amqp", "pamqp"})
_DB_INDEX = re.compile(r"\d{1,9}")


def check_broker_url(url: str, scheme: str) -> None:
    """Raise :class:`ImproperlyConfigured` for a URL of ``scheme`` its broker would misread."""
    if scheme in REDIS_SCHEMES:
        _check_redis(url)


def _check_redis(url: str) -> None:
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ImproperlyConfigured(f"malformed Redis URL {mask_url(url)!r}: {exc}") from None
    given = []
    if parts.scheme.lower() != "unix":  # unix:///path/to/socket: the path is the socket
        db = parts.path.strip("/")
        if db:
            given.append(("the path", db))
    given += [("?db=", value) for value in parse_qs(parts.query).get("db", [])]
    for where, db in given:
        if not _DB_INDEX.fullmatch(db):
            raise ImproperlyConfigured(
                f"the database in Redis URL {mask_url(url)!r} must be a number such as /0, got "
                f"{db!r} in {where} (redis-py would silently use database 0)"
            )


def client_error(exc: BaseException) -> str | None:
    """``"Type: message"`` when ``exc`` comes from a broker's client library, else None."""
    module = type(exc).__module__.partition(".")[0]
    if module not in CLIENT_LIBRARIES:
        return None
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{type(exc).__name__}: {text}"
