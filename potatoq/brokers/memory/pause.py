"""Pausing queues on the memory broker: a dict of paused queue -> since, in the store."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from potatoq.brokers.base import Broker, validate_queue_name

if TYPE_CHECKING:
    from .store import Store


class MemoryPause(Broker):
    """``pause_queue`` / ``resume_queue`` / ``paused_queues`` (mixed into :class:`MemoryBroker`)."""

    if TYPE_CHECKING:
        _store: Store

    def pause_queue(self, queue: str) -> bool:
        validate_queue_name(queue)
        store = self._store
        with store.lock:
            if queue in store.paused:
                return False
            store.paused[queue] = time.time()
            return True

    def resume_queue(self, queue: str) -> bool:
        validate_queue_name(queue)
        store = self._store
        with store.lock:
            return store.paused.pop(queue, None) is not None

    def paused_queues(self) -> dict[str, float]:
        store = self._store
        with store.lock:
            return dict(store.paused)
