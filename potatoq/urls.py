"""Celery's and kombu's spellings of broker and result-backend URLs, read as potatoq's.

A migrated project keeps its settings, so the URLs Celery accepts must mean the same here
before the broker registry sees them:

* ``pyamqp://`` and ``librabbitmq://`` are ``amqp://``, ``redis+socket://`` is ``unix://``
  (kombu's transport names);
* in an AMQP URL a path starting with ``//`` names a vhost that starts with ``/``:
  ``amqp://guest@host//`` is vhost ``/``, as kombu reads it (pika would read an empty vhost,
  which RabbitMQ refuses), so the vhost is written percent-encoded (``/%2F``);
* ``amqp://h1//;amqp://h2//`` (the nodes of a RabbitMQ cluster, tried in order) has each of
  its URLs read that way;
* ``db+sqlite:///results.sqlite`` and ``db+postgresql://…`` (Celery's SQLAlchemy result
  backend, with or without a ``+driver``) are the SQLite and PostgreSQL brokers' result
  storage: ``sqlite:///results.sqlite``, ``postgresql://…``.

``rpc://`` is not a URL of a store; the app reads it (see ``Potatoq.backend``).

Checks made before a broker is built, and client errors told in one line:

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
from urllib.parse import parse_qs, quote, unquote, urlsplit, urlunsplit

from .exceptions import ImproperlyConfigured
from .utils import mask_url

__all__ = ["CLIENT_LIBRARIES", "check_broker_url", "client_error", "is_rpc", "normalize_url"]

REDIS_SCHEMES = frozenset({"redis", "rediss", "valkey", "valkeys", "unix"})
CLIENT_LIBRARIES = frozenset({"redis", "valkey", "psycopg", "psycopg_pool", "pika", "amqp", "pamqp"})
_DB_INDEX = re.compile(r"\d{1,9}")


_ALIASES = {"pyamqp": "amqp", "librabbitmq": "amqp", "pyamqps": "amqps", "redis+socket": "unix"}
_SQL_SCHEMES = ("sqlite", "postgresql", "postgres")


def normalize_url(url: str) -> str:
    """``url`` with Celery's and kombu's spellings replaced by the ones potatoq's brokers read.

    Several AMQP URLs joined by ``;`` (the nodes of a RabbitMQ cluster, as Celery writes
    them) are normalized one by one."""
    if ";" in url and _scheme(url) in ("amqp", "amqps"):
        parts = [part.strip() for part in url.split(";")]
        return ";".join(_normalize_one(part) for part in parts if part)
    return _normalize_one(url)


def _scheme(url: str) -> str:
    scheme = url.partition("://")[0].strip().lower()
    return _ALIASES.get(scheme, scheme)


def _normalize_one(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    lowered = scheme.lower()
    lowered = _ALIASES.get(lowered, lowered)
    if lowered.startswith(
        "db+"
    ):  # Celery's SQLAlchemy result backend: db+sqlite://, db+postgresql+psycopg2://
        lowered = lowered[len("db+") :]
    base = lowered.split("+", 1)[0]
    if base in _SQL_SCHEMES:
        lowered = base  # SQLAlchemy's +driver suffix: the brokers pick their own driver
    url = f"{lowered}://{rest}"
    if lowered in ("amqp", "amqps"):
        url = _kombu_vhost(url)
    return url


def _kombu_vhost(url: str) -> str:
    """``amqp://host//`` → ``amqp://host/%2F``: kombu's vhost is the path after its first slash."""
    parts = urlsplit(url)
    if not parts.path.startswith("//"):
        return url
    vhost = unquote(parts.path[1:])
    return urlunsplit(parts._replace(path="/" + quote(vhost, safe="")))


def is_rpc(value: object) -> bool:
    """True for Celery's RPC result backend: ``"rpc"`` or ``"rpc://…"``."""
    if not isinstance(value, str):
        return False
    lowered = value.strip().lower()
    return lowered == "rpc" or lowered.startswith("rpc://")


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
