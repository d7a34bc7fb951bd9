"""The limit store on a Redis (or Valkey) result backend: each transition is one Lua script
of ``lua/`` run on the backend's server, so it is atomic across every process; keys live
under the backend's key prefix and ``rmq:``."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from potatoq.utils.package_files import files as package_files

from .store import LimitStore

__all__ = ["RedisStore"]

_SOURCES: dict[str, str] = {}
_SOURCES_LOCK = threading.Lock()


def _source(name: str) -> str:
    with _SOURCES_LOCK:
        text = _SOURCES.get(name)
        if text is None:
            text = package_files(__package__).joinpath("lua", f"{name}.lua").read_text()
            _SOURCES[name] = text
        return text


class RedisStore(LimitStore):
    """The Lua transitions on a Redis result backend (one per RabbitMQ broker)."""

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
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
