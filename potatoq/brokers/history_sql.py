"""What the SQLite and PostgreSQL brokers share about task history: query parameters, the
shape of a page's statement, and rows.

Both keep the same columns (``potatoq_history``) and page on the ``seq`` column; the SQL
itself lives in each broker's ``sql/history.sql``.

A page's statement holds only the filters the query sets (a ``:name IS NULL OR`` clause
keeps the planner off the indexes), in two roles:

* the *window*: the rows a page may read, an index range walked newest first. Below the
  cursor, of the first of task id, name, queue and state that is set (its ``(x, seq)``
  index; none: the table by ``seq``), and inside the ``seq`` bounds of a time range. A
  time range is bounded by two probes of the ``finished_at`` index: rows are inserted in
  ``seq`` order at most ``APPEND_LAG`` after they finished (a worker holds its records that
  long at most: one task's run) and ``CLOCK_SKEW`` before;
* the *checks*: every other filter (a second equality, the exact time range, exception
  text), tested on each row of the window. A page with checks reads at most ``SCAN_MAX``
  window rows (the ``floor``: the window's ``SCAN_MAX``-th row): when they hold fewer
  matches than asked, the page comes back short with the floor as its cursor, and the
  next page reads on from there. Redis reads its stream the same way.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Sequence
from typing import Any

from .history import HistoryPage, HistoryQuery, HistoryRecord

__all__ = [
    "COLUMNS",
    "CURSOR_START",
    "SCAN_MAX",
    "Shape",
    "column_values",
    "compose",
    "page_from_rows",
    "query_params",
    "row_values",
]

#: Larger than any seq: the first page starts "before" it.
CURSOR_START = 2**62

SCAN_MAX = 20_000  # window rows one page with checks reads at most (as Redis)
CLOCK_SKEW = 60.0  # seconds a worker's clock (finished_at) may run ahead of the insert
APPEND_LAG = 3600.0  # seconds a record may wait in its thread's buffer (one task's run)

#: The equality filters that can drive a page (their ``(x, seq)`` index), in that order.
DRIVERS = ("task_id", "name", "queue", "state")


@dataclasses.dataclass(frozen=True)
class Shape:
    """Which lines of the ``history_filters`` block a page's statement uses."""

    driver: str | None  # the equality filter whose index the window walks
    window: frozenset[str]  # time bounds of the window: "since", "until"
    checks: frozenset[str]  # filters tested on each row of the window

    @classmethod
    def of(cls, query: HistoryQuery) -> Shape:
        driver = next((f for f in DRIVERS if getattr(query, f) is not None), None)
        window = frozenset(f for f in ("since", "until") if getattr(query, f) is not None)
        checks = frozenset(
            f for f in (*DRIVERS, "since", "until", "text") if f != driver and getattr(query, f)
        )
        return cls(driver, window, checks)

    @property
    def capped(self) -> bool:
        return bool(self.checks)


_MARKED = re.compile(r"^(?P<sql>.*?)\s*--\s*(?P<role>window|by|check):\s*(?P<filter>\w+)\s*$")


def filter_lines(block: str) -> dict[tuple[str, str], str]:
    """The marked lines of a ``history_filters`` block: ``{(role, filter): sql}``."""
    found = {}
    for line in block.splitlines():
        match = _MARKED.match(line)
        if match:
            found[match["role"], match["filter"]] = match["sql"].strip()
    return found


def compose(page: str, floor: str, filters: dict[tuple[str, str], str], shape: Shape) -> tuple[str, str]:
    """The ``history_page`` and ``history_floor`` statements for ``shape``: their
    ``/*window*/``, ``/*floor*/`` and ``/*checks*/`` comments replaced by its lines."""
    window = [filters["window", f] for f in sorted(shape.window)]
    if shape.driver is not None:
        window.append(filters["by", shape.driver])
    window_sql = "\n  ".join(window)
    floor_sql = floor.replace("/*window*/", window_sql)
    bound = f"AND seq >= coalesce(({floor_sql.rstrip().rstrip(';')}), -1)" if shape.capped else ""
    checks = "\n  ".join(filters["check", f] for f in sorted(shape.checks))
    composed = page.replace("/*window*/", window_sql).replace("/*floor*/", bound).replace("/*checks*/", checks)
    return composed, floor_sql

COLUMNS = (
    "task_id", "name", "queue", "state", "finished_at", "started_at", "enqueued_at", "due_at",
    "runtime", "worker", "pid", "deliveries", "retries", "exc_type", "exc_message",
    "args_preview", "result_preview", "parent_id", "root_id", "group_id",
)  # fmt: skip

#: A record's ``COLUMNS`` as a tuple (the insert's positional parameters): one C call.
row_values: Any = operator.attrgetter(*COLUMNS)


def column_values(records: Sequence[HistoryRecord]) -> dict[str, list[Any]]:
    """``records`` column by column (parameters of an insert from parallel arrays)."""
    return dict(
        zip(COLUMNS, (list(column) for column in zip(*map(row_values, records), strict=True)), strict=True)
    )


def query_params(query: HistoryQuery) -> dict[str, Any]:
    """``query`` as the parameters of the ``history_page`` statement."""
    if query.cursor is None:
        cursor = CURSOR_START
    else:
        try:
            cursor = int(query.cursor)
        except ValueError:
            raise ValueError(f"history cursor {query.cursor!r} is not one this broker issued") from None
    return {
        "cursor": cursor,
        "name": query.name,
        "state": query.state,
        "queue": query.queue,
        "task_id": query.task_id,
        "since": query.since,
        "until": query.until,
        "since_early": None if query.since is None else query.since - APPEND_LAG - CLOCK_SKEW,
        "until_late": None if query.until is None else query.until + APPEND_LAG + CLOCK_SKEW,
        "text": query.text.lower() if query.text else None,
        "limit": query.limit + 1,
        "scan_last": SCAN_MAX - 1,
    }


def page_from_rows(
    rows: Sequence[Sequence[Any]], query: HistoryQuery, floor: int | None = None
) -> HistoryPage:
    """Rows of ``seq, <columns>`` (``limit + 1`` at most) as a page; ``floor``: the lowest
    seq a capped page read, the cursor of a short page that didn't reach the end."""
    records = [
        HistoryRecord(**dict(zip(COLUMNS, row[1:], strict=True)), cursor=str(row[0]))
        for row in rows[: query.limit]
    ]
    if len(rows) > query.limit and records:
        return HistoryPage(records, records[-1].cursor)
    return HistoryPage(records, None if floor is None else str(floor))
