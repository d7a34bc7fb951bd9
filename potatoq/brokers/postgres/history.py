"""Task history on PostgreSQL (see :mod:`potatoq.brokers.history`).

A settle is one statement in autocommit mode, so its record is appended right after it
commits (one small INSERT, amortised trim): a worker killed between the two loses that one
record, never a task or its result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import history as hist
from ..base import Broker, Delivery, HistoryPage, HistoryQuery, HistoryRecord, Outcome
from ..history_sql import page_from_rows, query_params
from ...exceptions import MessageDecodeError
from ...message import Message

_FIELDS = tuple(f.name for f in dataclasses.fields(HistoryRecord) if f.name != "cursor")


class PostgresHistory(Broker):
    """Mixin of :class:`PostgresBroker`: writing and reading ``potatoq_history``."""

    if TYPE_CHECKING:

        def _run(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]: ...

    def _history_settled(self, delivery: Delivery, outcome: Outcome, now: float) -> None:
        """Record a settle that committed."""
        record = hist.for_settle(delivery, outcome, now, self.config.history)
        if record is not None:
            self.append_history([record])

    def append_history(self, records: Sequence[HistoryRecord]) -> None:
        if not records:
            return
        rows = [r.columns() for r in records]
        self._run("history_insert", {name: [row[name] for row in rows] for name in _FIELDS})
        settings = self.config.history
        if hist.should_trim(settings):
            cutoff = max(r.finished_at for r in records) - settings.max_age
            self._run("history_trim", {"cutoff": cutoff, "keep": settings.max_count})

    def history(self, query: HistoryQuery) -> HistoryPage:
        return page_from_rows(self._run("history_page", query_params(query)), query)

    def _revoke_recorded(self, task_id: str, now: float) -> bool:
        """``revoke``, leaving a REVOKED record for the waiting task it removed."""
        rows = self._run("history_job_revoke", {"id": task_id})
        if not rows:
            return False
        queue, payload = rows[0]
        try:
            name: str | None = Message.decode(bytes(payload)).task
        except MessageDecodeError:
            name = None  # a garbage row: recorded without a name
        record = hist.for_revoke(task_id, name, queue, now, self.config.history)
        if record is not None:
            self.append_history([record])
        return True
