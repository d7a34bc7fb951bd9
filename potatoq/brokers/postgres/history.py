"""Task history on PostgreSQL (see :mod:`potatoq.brokers.history`).

A settle is one statement (one round trip), and whether it applied is known only from its
reply. So its record goes to this thread's :class:`~potatoq.brokers.history_buffer.HistoryBuffer`,
and the buffer's records are inserted with one statement *pipelined before a settle this
thread makes anyway* (no extra round trip) once it holds ``task_history_batch`` records or
its oldest is a second old; or when the thread next waits for work, reads history or
closes. A worker killed meanwhile loses the records it held (see history_buffer), never a
task or its result. The same statement upserts the records' per-minute rollups
(``potatoq_history_rollups``, see :mod:`~potatoq.brokers.history_rollup`): one transaction.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from ...exceptions import MessageDecodeError
from ...message import Message
from .. import history as hist
from ..base import (
    Broker,
    HistoryBucket,
    HistoryPage,
    HistoryQuery,
    LinkedTask,
)
from ..history import HistoryRow
from ..history_rollup import (
    buckets_from_rollups,
    rollup_of_row,
    rollup_values,
    rollups_of,
    sample_of_row,
    window_minutes,
)
from ..history_sql import (
    HeldRows,
    Shape,
    column_values,
    compose,
    drop_expired,
    links_from_rows,
    links_statement,
    page_from_rows,
    query_params,
)
from . import statements

_BLOCKS = (
    "history_page",
    "history_floor",
    "history_page_by_time",
    "history_floor_by_time",
    "history_filters",
)
# (schema, shape) -> the page and floor statements: a few dozen shapes per schema
_SHAPED: dict[tuple[str, Shape], tuple[statements.Statement, statements.Statement]] = {}


class PostgresHistory(HeldRows, Broker):
    """Mixin of :class:`PostgresBroker`: writing and reading ``potatoq_history``."""

    if TYPE_CHECKING:

        def _run(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]: ...
        def _statements(self) -> statements.Statements: ...
        def _connection(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]: ...

    def _history_in(self, conn: psycopg.Connection[Any], rows: Sequence[HistoryRow]) -> None:
        """Queue the INSERT (and now and then the trim) of ``rows`` on ``conn``."""
        if not rows:
            return
        stmts = self._statements()
        rollups = rollup_values(rollups_of(map(sample_of_row, rows)))
        conn.execute(stmts["history_insert"].query, {**column_values(rows), **rollups})
        settings = self.config.history
        if hist.should_trim(settings, len(rows)):
            cutoff = max(r[4] for r in rows) - settings.max_age  # finished_at
            conn.execute(stmts["history_trim"].query, {"cutoff": cutoff, "keep": settings.max_count})
            conn.execute(stmts["history_rollups_trim"].query, {"cutoff": cutoff})

    def _run_after_history(self, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Run statement ``name``, preceded in the same round trip by the buffered records."""
        with self._history_riding() as pending:
            if not pending:
                return self._run(name, params)
            with self._connection() as conn, conn.pipeline():
                self._history_in(conn, pending)
                cur = conn.execute(self._statements()[name].query, params)
        return cur.fetchall() if cur.description is not None else []

    def _history_flush(self) -> None:
        """Insert this thread's buffered records now (idle, before a read, at close)."""
        pending = self._history_take()
        if not pending:
            return
        try:
            with self._connection() as conn, conn.pipeline():
                self._history_in(conn, pending)
        except BaseException:
            self._history_buffer().restore(pending)
            raise

    def history(self, query: HistoryQuery) -> HistoryPage:
        self._history_flush()  # this thread's own settles are visible to it at once
        shape = Shape.of(query)
        page, floor = self._history_shaped(shape)
        params = query_params(query)
        lowest = None
        # prepare=False: planned each time with the values (a rare name walks its index, a
        # common one the table); a prepared statement's generic plan takes every name as
        # common, and a rare one's page would read the whole table
        with self._connection() as conn:
            rows = conn.execute(page.query, params, prepare=False).fetchall()
            if shape.capped and len(rows) <= query.limit:  # short: did the window end, or the cap?
                found = conn.execute(floor.query, params, prepare=False).fetchone()
                lowest = found
        return drop_expired(page_from_rows(rows, query, lowest), time.time() - self.config.history.max_age)

    def history_buckets(
        self, start: float, step: float, buckets: int, name: str | None = None
    ) -> dict[int, HistoryBucket] | None:
        """From the rollups: one primary-key range of ``name``'s minutes (or hours)."""
        self._history_flush()
        span, lo, hi = window_minutes(start, step, buckets)
        rows = self._run("history_rollups", {"name": name or "", "span": span, "lo": lo, "hi": hi})
        return buckets_from_rollups(map(rollup_of_row, rows), start, step, buckets)

    def history_links(self, *, parent_id: str | None = None, group_id: str | None = None) -> list[LinkedTask]:
        self._history_flush()
        name, params = links_statement(parent_id, group_id)
        return links_from_rows(self._run(name, params), time.time() - self.config.history.max_age)

    def _history_shaped(self, shape: Shape) -> tuple[statements.Statement, statements.Statement]:
        """The page and floor statements for ``shape``, rendered for this broker's schema."""
        stmts = self._statements()
        key = (stmts.schema, shape)
        found = _SHAPED.get(key)
        if found is None:
            texts = {name: stmts[name].text for name in _BLOCKS}
            page, floor = compose(texts, shape)
            found = _SHAPED[key] = (
                statements.Statement.of("history_page", page),
                statements.Statement.of("history_floor", floor),
            )
        return found

    def _history_statement(self, query: HistoryQuery) -> tuple[str, dict[str, Any]]:
        """The SQL and parameters :meth:`history` runs for ``query`` (plan guards, benchmarks)."""
        return self._history_shaped(Shape.of(query))[0].text, query_params(query)

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
