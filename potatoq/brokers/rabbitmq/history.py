"""Task history on RabbitMQ: kept by the result store (see :mod:`potatoq.brokers.history`).

Queues can't be searched, so records go to the broker that holds this broker's results
(``result_backend``: Redis, PostgreSQL or SQLite), appended once a settle was applied.
A settle's record is held by the result backend and written with its batch (see
:mod:`potatoq.brokers.history_buffer`); the worker flushes it when it waits for work or
closes. Without a result backend there is no history (``history`` returns empty pages).
The charts read the result backend's per-minute rollups (written with its records).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import history as hist
from ..base import (
    Broker,
    Delivery,
    HistoryBucket,
    HistoryPage,
    HistoryQuery,
    HistoryRecord,
    LinkedTask,
    Outcome,
)
from ..history_buffer import HeldHistory


class RabbitMQHistory(Broker):
    """Mixin of :class:`RabbitMQBroker`: history through the result backend."""

    if TYPE_CHECKING:
        backend: Broker | None

    def _history_settled(self, delivery: Delivery, outcome: Outcome) -> None:
        backend = self.backend
        if backend is None or not self.config.history.enabled:
            return
        if isinstance(backend, HeldHistory):
            # written with the backend's next batch (history_buffer), in the backend's own
            # form: a Redis result store holds a compact record (history_compact)
            backend.hold_settled(delivery, outcome)
            return
        record = hist.for_settle(delivery, outcome, time.time(), self.config.history)
        if record is not None:
            backend.hold_history([record])

    def append_history(self, records: Sequence[HistoryRecord]) -> None:
        if self.backend is not None and records:
            self.backend.append_history(records)

    def flush_history(self, force: bool = True) -> bool:
        return self.backend is not None and self.backend.flush_history(force)

    def _history_idle(self, timeout: float) -> float:
        """Before a wait for work: the backend's held records are written once due, and
        while it holds some the wait is cut to ``flush_after`` (so an idle worker's records
        land within about twice that, with the wait after)."""
        held = self.flush_history(force=False)
        return min(timeout, self.config.history.flush_after) if held else timeout

    def history(self, query: HistoryQuery) -> HistoryPage:
        if self.backend is None:
            return HistoryPage([], None)
        return self.backend.history(query)

    def history_buckets(
        self, start: float, step: float, buckets: int, name: str | None = None
    ) -> dict[int, HistoryBucket] | None:
        if self.backend is None:
            return None
        return self.backend.history_buckets(start, step, buckets, name)

    def history_links(self, *, parent_id: str | None = None, group_id: str | None = None) -> list[LinkedTask]:
        hist.link_filter(parent_id, group_id)  # the same refusal with or without a backend
        if self.backend is None:
            return []
        return self.backend.history_links(parent_id=parent_id, group_id=group_id)
