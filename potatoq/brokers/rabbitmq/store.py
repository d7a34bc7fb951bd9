"""Where the RabbitMQ broker keeps concurrency slots, rate tokens and unique keys: in its
result backend (RabbitMQ queues can't be searched or updated), which may be a Redis,
PostgreSQL or SQLite broker.

:class:`LimitStore` is the interface: a handful of *transitions*, each atomic across every
process sharing the backend, called by name with a list of arguments through
:meth:`LimitStore.run` (the names, arguments and replies are those of the Lua scripts in
``lua/``, which document each one). The implementations, chosen by the backend's URL
scheme:

* :class:`~.store_redis.RedisStore`: one Lua script per transition, by the Redis
  server's clock; keys under the backend's key prefix and ``rmq:``;
* :class:`~.store_postgres.PostgresStore`: a short transaction whose first statement
  locks the key's row, by the PostgreSQL server's clock; tables ``potatoq_rmq_*`` in the
  backend's schema (migration 0009);
* :class:`~.store_sqlite.SQLiteStore`: one ``BEGIN IMMEDIATE`` transaction, by the host's
  clock (every process of a SQLite file is on one host); the same tables (migration 0007).

The SQL ones share their logic in :mod:`.store_sql`; their statements are in
``sql/postgres.sql`` and ``sql/sqlite.sql``, under the same names.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

from potatoq.brokers.base import Broker
from potatoq.exceptions import ImproperlyConfigured

__all__ = ["LimitStore", "has_store", "store_of"]

_STORES: weakref.WeakKeyDictionary[Broker, LimitStore] = weakref.WeakKeyDictionary()
_STORES_LOCK = threading.Lock()

#: The transitions every store runs (``lua/<name>.lua`` documents arguments and reply).
TRANSITIONS = (
    "limit_set",
    "limit_usage",
    "rate_set",
    "rate_take",
    "rate_usage",
    "slot_release",
    "slot_renew",
    "slot_take",
    "unique_release",
    "unique_take",
)


class LimitStore:
    """The slots, tokens and unique keys of one RabbitMQ broker, in its result backend.

    A SQL store implements each transition as a method of that name taking the arguments
    one by one; the Redis store overrides :meth:`run` to call its script instead.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def run(self, name: str, args: Sequence[str | bytes | int | float]) -> Any:
        """Run transition ``name`` with ``args``; its reply, shaped as the Lua script's."""
        if name not in TRANSITIONS:
            raise ValueError(f"unknown limit-store transition {name!r}")
        return getattr(self, name)(*args)


def _kind(backend: Broker | None) -> str | None:
    """Which store ``backend`` can hold: known by its URL schemes and the calls it exposes,
    since a broker package imports no other broker (tests/test_layers.py)."""
    if backend is None:
        return None
    schemes = type(backend).schemes
    if "redis" in schemes and callable(getattr(backend, "_client", None)) and hasattr(backend, "keys"):
        return "redis"
    if "postgresql" in schemes and callable(getattr(backend, "_connection", None)):
        return "postgres"
    if "sqlite" in schemes and callable(getattr(backend, "_write", None)):
        return "sqlite"
    return None


def has_store(backend: Broker | None) -> bool:
    """Whether ``backend`` can keep slots, tokens and unique keys."""
    return _kind(backend) is not None


def _make(kind: str, backend: Broker) -> LimitStore:
    # Imported here: each pulls in its backend's driver (redis, psycopg), which a RabbitMQ
    # broker with another backend needn't have installed.
    if kind == "redis":
        from .store_redis import RedisStore

        return RedisStore(backend)
    if kind == "postgres":
        from .store_postgres import PostgresStore

        return PostgresStore(backend)
    from .store_sqlite import SQLiteStore

    return SQLiteStore(backend)


def store_of(backend: Broker | None, what: str) -> LimitStore:
    """The store on ``backend``, or a clear error naming what needed it."""
    kind = _kind(backend)
    if kind is None or backend is None:
        raise ImproperlyConfigured(
            f"{what} on RabbitMQ keep their state in the result backend, which must be a "
            f"Redis, PostgreSQL or SQLite URL (result_backend is "
            f"{type(backend).__name__ if backend else 'not set'})"
        )
    with _STORES_LOCK:
        store = _STORES.get(backend)
        if store is None:
            store = _STORES[backend] = _make(kind, backend)
    return store
