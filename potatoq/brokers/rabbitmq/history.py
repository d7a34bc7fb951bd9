"""Task history on RabbitMQ: kept by the result store (see :mod:`potatoq.brokers.history`).

Queues can't be searched, so records go to the broker that holds this broker's results
(``result_backend``: Redis, PostgreSQL or SQLite), appended once a settle was applied.
Without a result backend there is no history (``history`` returns empty pages).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import history as hist
from ..base import Broker, Delivery, HistoryPage, HistoryQuery, HistoryRecord, Outcome


class RabbitMQHistory(Broker):
    """Mixin of :class:`RabbitMQBroker`: history through the result backend."""

    if TYPE_CHECKING:
        backend: Broker | None

    def _history_settled(self, delivery: Delivery, outcome: Outcome) -> None:
        if self.backend is None:
            return
        record = hist.for_settle(delivery, outcome, time.time(), self.config.history)
        if record is not None:
            self.backend.append_history([record])

    def append_history(self, records: Sequence[HistoryRecord]) -> None:
        if self.backend is not None and records:
            self.backend.append_history(records)

    def history(self, query: HistoryQuery) -> HistoryPage:
        if self.backend is None:
            return HistoryPage([], None)
        return self.backend.history(query)
