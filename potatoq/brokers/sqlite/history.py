"""Task history on SQLite: a row written in the settle's own transaction (see
:mod:`potatoq.brokers.history`), trimmed to the retention setting now and then."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import history as hist
from ..base import Broker, Delivery, HistoryPage, HistoryQuery, HistoryRecord, Outcome
from ..history_sql import page_from_rows, query_params
from .setup import SQL


class SQLiteHistory(Broker):
    """Mixin of :class:`SQLiteBroker`: writing and reading ``potatoq_history``."""

    if TYPE_CHECKING:
        clock: Callable[[], float]

        def _read(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]: ...
        def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

    def _history_in(self, conn: sqlite3.Connection, delivery: Delivery, outcome: Outcome, now: float) -> None:
        """Record a settle that was applied, inside its transaction."""
        record = hist.for_settle(delivery, outcome, now, self.config.history)
        if record is not None:
            self._history_rows_in(conn, [record], now)

    def _history_revoked_in(self, conn: sqlite3.Connection, task_id: str, now: float) -> None:
        """Record the waiting task ``revoke`` is about to delete (same transaction)."""
        if self.config.history.enabled:
            conn.execute(SQL["history_revoked"], {"id": task_id, "now": now})

    def _history_lost_in(
        self,
        conn: sqlite3.Connection,
        task_id: str,
        task: str | None,
        queue: str,
        deliveries: int,
        reason: str,
        now: float,
    ) -> None:
        """Record a task ``recover`` dead-lettered (same transaction)."""
        record = hist.for_lost(task_id, task, queue, deliveries, reason, now, self.config.history)
        if record is not None:
            self._history_rows_in(conn, [record], now)

    def _history_rows_in(
        self, conn: sqlite3.Connection, records: Sequence[HistoryRecord], now: float
    ) -> None:
        conn.executemany(SQL["history_insert"], [r.columns() for r in records])
        if hist.should_trim(self.config.history):
            settings = self.config.history
            conn.execute(SQL["history_trim_age"], {"cutoff": now - settings.max_age})
            conn.execute(SQL["history_trim_count"], {"keep": settings.max_count})

    def history(self, query: HistoryQuery) -> HistoryPage:
        return page_from_rows(self._read("history_page", query_params(query)), query)

    def append_history(self, records: Sequence[HistoryRecord]) -> None:
        if not records:
            return
        with self._write() as conn:
            self._history_rows_in(conn, records, self.clock())
