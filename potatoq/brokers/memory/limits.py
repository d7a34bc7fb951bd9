"""The memory broker's concurrency-limit calls: run-time overrides and usage. The claim
(:meth:`Store.pop_ready`) skips jobs whose key has every slot running."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import Broker
from ..limits import LimitUsage, validate_limit
from .store import READY, Store


class MemoryLimits(Broker):
    """Concurrency limits on the in-process store (mixed into :class:`MemoryBroker`)."""

    if TYPE_CHECKING:
        _store: Store

    def set_limit(self, key: str, limit: int | None) -> None:
        key, limit = validate_limit(key, limit)
        store = self._store
        with store.lock:
            if limit is None:
                store.limit_overrides.pop(key, None)
            else:
                store.limit_overrides[key] = limit
            store.enqueued.notify_all()  # a raised limit frees slots

    def limits(self) -> list[LimitUsage]:
        store = self._store
        with store.lock:
            keys = {j.limit_key for j in store.jobs.values() if j.limit_key is not None} | set(
                store.limit_overrides
            )
            found = []
            for key in sorted(keys):
                waiting = sum(1 for j in store.jobs.values() if j.state == READY and j.limit_key == key)
                maxes = [j.limit_max for j in store.jobs.values() if j.limit_key == key]
                carried = max(maxes) if maxes else None
                override = store.limit_overrides.get(key)
                found.append(
                    LimitUsage(
                        key=key,
                        limit=override if override is not None else carried,
                        running=store.running_where(key),
                        waiting=waiting,
                        override=override is not None,
                    )
                )
            return found
