"""Celery's and kombu's spellings of broker and result-backend URLs, read as potatoq's.

A migrated project keeps its settings, so the URLs Celery accepts must mean the same here
before the broker registry sees them:

* ``pyamqp://`` and ``librabbitmq://`` are ``amqp://``, ``redis+socket://`` is ``unix://``
  (kombu's transport names);
* in an AMQP URL a path starting with ``//`` names a vhost that starts with ``/``:
  ``amqp://guest@host//`` is vhost ``/``, as kombu reads it (pika would read an empty vhost,
  which RabbitMQ refuses), so the vhost is written percent-encoded (``/%2F``);
* ``db+sqlite:///results.sqlite`` and ``db+postgresql://…`` (Celery's SQLAlchemy result
  backend, with or without a ``+driver``) are the SQLite and PostgreSQL brokers' result
  storage: ``sqlite:///results.sqlite``, ``postgresql://…``.

``rpc://`` is not a URL of a store; the app reads it (see ``Potatoq.backend``).
"""

from __future__ import annotations

from urllib.parse import quote, unquote, urlsplit, urlunsplit

__all__ = ["is_rpc", "normalize_url"]

_ALIASES = {"pyamqp": "amqp", "librabbitmq": "amqp", "pyamqps": "amqps", "redis+socket": "unix"}
_SQL_SCHEMES = ("sqlite", "postgresql", "postgres")


def normalize_url(url: str) -> str:
    """``url`` with Celery's and kombu's spellings replaced by the ones potatoq's brokers read."""
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
