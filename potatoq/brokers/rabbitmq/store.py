"""Where the RabbitMQ broker keeps concurrency slots, rate tokens and unique keys: in its
result backend, which must be a Redis broker for these (RabbitMQ queues can't be searched
or updated). Each transition is one Lua script of ``lua/`` run on the backend's Redis, so
it is atomic across every process; keys live under the backend's key prefix and
``rmq:``.

PostgreSQL and SQLite result backends don't carry these yet: a limited or unique task
sent through RabbitMQ with one of them is refused with :class:`ImproperlyConfigured`.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from importlib import resources
from typing import Any

from potatoq.brokers.base import Broker
from potatoq.exceptions import ImproperlyConfigured

__all__ = ["LimitStore", "has_store", "store_of"]

_SOURCES: dict[str, str] = {}
_SOURCES_LOCK = threading.Lock()
_STORES: weakref.WeakKeyDictionary[Broker, LimitStore] = weakref.WeakKeyDictionary()


def _source(name: str) -> str:
    with _SOURCES_LOCK:
        text = _SOURCES.get(name)
        if text is None:
            text = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()
            _SOURCES[name] = text
        return text


class LimitStore:
    """The Lua transitions on a Redis result backend (one per RabbitMQ broker)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.prefix = f"{backend.keys.prefix}rmq:"
        self._scripts: dict[tuple[int, str], Any] = {}

    def run(self, name: str, args: Sequence[str | bytes | int | float]) -> Any:
        # The backend's client of this process and thread; a script object per client
        # (redis-py loads it with EVALSHA, and again after a NOSCRIPT).
        client = self.backend._client()
        script = self._scripts.get((id(client), name))
        if script is None:
            script = self._scripts[(id(client), name)] = client.register_script(_source(name))
        with self.backend._errors():
            return script(keys=[], args=[self.prefix, *args])


def has_store(backend: Broker | None) -> bool:
    """Whether ``backend`` can keep slots, tokens and unique keys (a Redis broker)."""
    # Known by its URL schemes and the client it exposes: a broker package imports no
    # other broker (tests/test_layers.py).
    return (
        backend is not None
        and "redis" in type(backend).schemes
        and callable(getattr(backend, "_client", None))
        and hasattr(backend, "keys")
    )


def store_of(backend: Broker | None, what: str) -> LimitStore:
    """The store on ``backend``, or a clear error naming what needed it."""
    if not has_store(backend):
        raise ImproperlyConfigured(
            f"{what} on RabbitMQ keep their state in the result backend, which must be "
            f"a Redis URL (result_backend is {type(backend).__name__ if backend else 'not set'})"
        )
    assert backend is not None
    with _SOURCES_LOCK:
        store = _STORES.get(backend)
        if store is None:
            store = _STORES[backend] = LimitStore(backend)
    return store
