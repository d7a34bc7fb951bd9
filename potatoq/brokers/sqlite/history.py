"""Task history on SQLite (see :mod:`potatoq.brokers.history`).

A settle's record is built after its transaction commits (not while holding the write
lock) and goes to this thread's :class:`~potatoq.brokers.history_buffer.HistoryBuffer`;
the buffer's rows are inserted *inside a settle transaction the thread makes anyway* once
it holds ``task_history_batch`` records or its oldest is a second old (one commit's worth
of index pages for the batch, not per task), or in a transaction of their own when the
thread waits for work, reads history or closes. A worker killed meanwhile loses the
records it held, never a task or its result. Revokes and crash recovery write theirs in
their own transaction. Each insert also updates the records' per-minute and per-hour
rollups (``potatoq_history_rollups``, see :mod:`~potatoq.brokers.history_rollup`) in the
same transaction: the charts read those. Both are trimmed to the retention setting now and then."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import history as hist
from ..base import (
    Broker,
    HistoryBucket,
    HistoryPage,
    HistoryQuery,
    HistoryRecord,
    LinkedTask,
)
from ..history import HistoryRow
from ..history_rollup import (
    Keyed,
    buckets_from_rollups,
    rollup_of_row,
    rollup_row,
    rollups_of,
    sample_of_row,
    window_minutes,
)
from ..history_sql import (
    HeldRows,
    Shape,
    compose,
    drop_expired,
    links_from_rows,
    links_statement,
    page_from_rows,
    query_params,
)
from .setup import SQL


def rollups_in(conn: sqlite3.Connection, rollups: Sequence[Keyed]) -> None:
    """Add ``rollups`` to those stored, in ``conn``'s write transaction (BEGIN IMMEDIATE:
    no other writer between the read and the write)."""
    for keyed in rollups:
        found = conn.execute(SQL["history_rollup_get"], (keyed.name, keyed.span, keyed.minute)).fetchone()
        if found is not None:
            keyed.rollup.merge(rollup_of_row(found)[1])
    conn.executemany(SQL["history_rollup_put"], map(rollup_row, rollups))


class _Built(NamedTuple):
    """Some records as a write inserts them: their rows and their rollups (not yet merged
    with the stored ones), built in Python before the write lock is taken."""

    rows: Sequence[HistoryRow]
    rollups: list[Keyed]

    @classmethod
    def of(cls, rows: Sequence[HistoryRow]) -> _Built:
        return cls(rows, rollups_of(map(sample_of_row, rows)))


@functools.cache
def _shaped(shape: Shape) -> tuple[str, str]:
    """The page and floor statements for ``shape`` (a few dozen: cached)."""
    return compose(SQL, shape)


class SQLiteHistory(HeldRows, Broker):
    """Mixin of :class:`SQLiteBroker`: writing and reading ``potatoq_history``."""

    if TYPE_CHECKING:
        clock: Callable[[], float]

        def _read(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]: ...
        def _read_sql(self, sql: str, params: Mapping[str, Any]) -> list[Any]: ...
        def _write(
            self, rings: Collection[str] | None = None
        ) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

    @contextlib.contextmanager
    def _write_with_history(self, now: float) -> Iterator[sqlite3.Connection]:
        """:meth:`_write`, also inserting this thread's held records once they are due
        (kept for the next try if the transaction fails). Their rows and rollups are built
        before the write lock is taken: the other writers wait only for the statements."""
        with self._history_riding() as pending:
            built = _Built.of(pending) if pending else None
            with self._write() as conn:
                if built is not None:
                    self._history_built_in(conn, built, now)
                yield conn

    def _history_flush(self) -> None:
        """Insert this thread's held records now (idle, before a read, at close)."""
        pending = self._history_take()
        if not pending:
            return
        try:
            with self._write(rings=()) as conn:  # frees no work: no waiter to wake
                self._history_built_in(conn, _Built.of(pending), self.clock())
        except BaseException:
            self._history_buffer().restore(pending)
            raise

    def _history_revoked_in(self, conn: sqlite3.Connection, task_id: str, now: float) -> None:
        """Record the waiting task ``revoke`` is about to delete (same transaction)."""
        if not self.config.history.enabled:
            return
        found = conn.execute(SQL["history_revoked"], {"id": task_id}).fetchone()
        if found is not None:
            record = hist.for_revoke(task_id, found[0], found[1], now, self.config.history)
            if record is not None:
                self._history_rows_in(conn, [record], now)

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
        self._history_built_in(conn, _Built.of(self._as_held(records)), now)

    def _history_built_in(self, conn: sqlite3.Connection, built: _Built, now: float) -> None:
        conn.executemany(SQL["history_insert"], built.rows)
        rollups_in(conn, built.rollups)
        if hist.should_trim(self.config.history, len(built.rows)):
            settings = self.config.history
            conn.execute(SQL["history_trim_age"], {"cutoff": now - settings.max_age})
            conn.execute(SQL["history_trim_count"], {"keep": settings.max_count})
            conn.execute(SQL["history_rollups_trim"], {"cutoff": now - settings.max_age})

    def history(self, query: HistoryQuery) -> HistoryPage:
        self._history_flush()  # this thread's own settles are visible to it at once
        shape = Shape.of(query)
        page, floor = _shaped(shape)
        params = query_params(query)
        rows = self._read_sql(page, params)
        lowest = None
        if shape.capped and len(rows) <= query.limit:  # short: did the window end, or the cap?
            found = self._read_sql(floor, params)
            lowest = found[0] if found else None
        return drop_expired(page_from_rows(rows, query, lowest), self.clock() - self.config.history.max_age)

    def history_buckets(
        self, start: float, step: float, buckets: int, name: str | None = None
    ) -> dict[int, HistoryBucket] | None:
        """From the rollups: one primary-key range of ``name``'s minutes (or hours)."""
        self._history_flush()
        span, lo, hi = window_minutes(start, step, buckets)
        rows = self._read("history_rollups", {"name": name or "", "span": span, "lo": lo, "hi": hi})
        return buckets_from_rollups(map(rollup_of_row, rows), start, step, buckets)

    def history_links(self, *, parent_id: str | None = None, group_id: str | None = None) -> list[LinkedTask]:
        self._history_flush()
        name, params = links_statement(parent_id, group_id)
        return links_from_rows(self._read(name, params), self.clock() - self.config.history.max_age)

    def _history_statement(self, query: HistoryQuery) -> tuple[str, dict[str, Any]]:
        """The SQL and parameters :meth:`history` runs for ``query`` (plan guards, benchmarks)."""
        return _shaped(Shape.of(query))[0], query_params(query)
