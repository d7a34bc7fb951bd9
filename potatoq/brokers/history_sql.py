"""What the SQLite and PostgreSQL brokers share about task history: query parameters and rows.

Both keep the same columns (``potatoq_history``) and page on the ``seq`` column; the SQL
itself lives in each broker's ``sql/history.sql``.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from .history import HistoryPage, HistoryQuery, HistoryRecord

__all__ = ["COLUMNS", "CURSOR_START", "column_values", "page_from_rows", "query_params", "row_values"]

#: Larger than any seq: the first page starts "before" it.
CURSOR_START = 2**62

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
        "text": query.text.lower() if query.text else None,
        "limit": query.limit + 1,
    }


def page_from_rows(rows: Sequence[Sequence[Any]], query: HistoryQuery) -> HistoryPage:
    """Rows of ``seq, <columns>`` (``limit + 1`` at most) as a page."""
    records = [
        HistoryRecord(**dict(zip(COLUMNS, row[1:], strict=True)), cursor=str(row[0]))
        for row in rows[: query.limit]
    ]
    more = len(rows) > query.limit
    return HistoryPage(records, records[-1].cursor if more and records else None)
