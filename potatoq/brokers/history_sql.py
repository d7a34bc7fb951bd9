"""What the SQLite and PostgreSQL brokers share about task history: query parameters, the
shape of a page's statement, and rows.

Both keep the same columns (``potatoq_history``) and page on the ``seq`` column; the SQL
itself lives in each broker's ``sql/history.sql``.

A page's statement holds only the filters the query sets (a ``:name IS NULL OR`` clause
keeps the planner off the indexes), in two roles:

* the *window*: the index range a page walks, newest first, from just after its cursor.
  With a time range (and no task id): the ``finished_at`` index, and the page is in finish
  time order (the cursor is ``<finished_at>/<seq>``); with exception text too, its partial
  twin over the records that carry an exception (``potatoq_history_exc_finished``). Else by
  ``seq`` (the cursor is a seq) on the index of the first of task id, a state but SUCCESS,
  name, queue, exception text and SUCCESS that is set (:func:`drivers`), or the table.
  Exception text walks ``potatoq_history_exc``, the records with an exception type or
  message (a few % in a working deployment): a record without one can't hold any text but
  a single space (its haystack is ``" "``), so the text stays a check, on fewer rows;
* the *checks*: every other filter (a second equality filter, exception text, a time range
  beside a task id), tested on each row of the window. A page with checks reads at most
  ``SCAN_MAX`` window rows (down to the ``floor``: the window's ``SCAN_MAX``-th row): when
  they hold fewer matches than asked, the page comes back short with the floor as its
  cursor, and the next page reads on from there. Redis reads its stream the same way.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .history import (
    LINKS_SCAN,
    HistoryPage,
    HistoryQuery,
    HistoryRecord,
    HistoryRow,
    LinkedTask,
    link_filter,
    linked_tasks,
    row_for_settle,
    text_window,
)
from .history_buffer import HeldHistory
from .records import Delivery, Outcome

__all__ = [
    "COLUMNS",
    "CURSOR_START",
    "SCAN_MAX",
    "HeldRows",
    "Shape",
    "column_values",
    "compose",
    "drop_expired",
    "links_from_rows",
    "links_statement",
    "page_from_rows",
    "query_params",
    "row_values",
]

#: Larger than any seq: the first page starts "before" it.
CURSOR_START = 2**62

SCAN_MAX = 20_000  # window rows one page with checks reads at most (as Redis)
TIME_TOP = 1e300  # later than any finish time: a time-ordered first page starts before it

#: The filters that can drive a page: the equality filters (their ``(x, seq)`` index) and
#: exception text (the partial index of the records with an exception).
DRIVERS = ("task_id", "name", "queue", "text", "state")


def drivers(query: HistoryQuery) -> tuple[str, ...]:
    """The filters that may drive ``query``'s window, the likely rarest first: a task id; a
    state other than SUCCESS (failures, retries, dead letters and revokes are the exception
    in a working deployment, and "failures of this task" the common search); a name; a
    queue; exception text (the records with an exception: after a name or queue, which
    keep a rare name's text search on that name's few rows); then SUCCESS."""
    if query.state is not None and query.state != "SUCCESS":
        return ("task_id", "state", "name", "queue", "text")
    return DRIVERS


COLUMNS = (
    "task_id", "name", "queue", "state", "finished_at", "started_at", "enqueued_at", "due_at",
    "runtime", "worker", "pid", "deliveries", "retries", "exc_type", "exc_message",
    "args_preview", "result_preview", "parent_id", "root_id", "group_id",
)  # fmt: skip

#: A record's ``COLUMNS`` as a tuple (the insert's positional parameters): one C call.
row_values: Any = operator.attrgetter(*COLUMNS)


@dataclasses.dataclass(frozen=True)
class Shape:
    """Which statements and filter lines a page runs (see the module's docstring)."""

    by_time: bool  # the window is a time range on the finished_at index
    driver: str | None  # else the equality filter whose (x, seq) index the window walks
    window: frozenset[str]  # filters of the window: the driver, or "since" and "until"
    checks: frozenset[str]  # filters tested on each row of the window

    @classmethod
    def of(cls, query: HistoryQuery) -> Shape:
        # an empty text filters nothing (as hist.matches)
        given = {f for f in (*DRIVERS, "since", "until") if getattr(query, f) not in (None, "")}
        by_time = bool(given & {"since", "until"}) and query.task_id is None
        narrows = {"text"} if text_window(query) else set()
        can_drive = (given - {"text"}) | narrows
        driver = None if by_time else next((f for f in drivers(query) if f in can_drive), None)
        # a time window's until is its upper bound, time_top (see query_params); its text
        # line picks the finished_at index of the records with an exception
        window = frozenset(given & ({"since", "until"} | narrows)) if by_time else frozenset(given & {driver})
        # a text window holds the records with an exception: the text is still checked
        return cls(by_time, driver, window, frozenset((given - window) | (given & {"text"})))

    @property
    def capped(self) -> bool:
        return bool(self.checks)


_MARKED = re.compile(r"^(?P<sql>.*?)\s*--\s*(?P<role>window|check):\s*(?P<filter>\w+)\s*$")


def filter_lines(block: str) -> dict[tuple[str, str], str]:
    """The marked lines of a ``history_filters`` block: ``{(role, filter): sql}``."""
    found = {}
    for line in block.splitlines():
        match = _MARKED.match(line)
        if match:
            found[match["role"], match["filter"]] = match["sql"].strip()
    return found


def compose(statements: Mapping[str, str], shape: Shape) -> tuple[str, str]:
    """The page and floor statements for ``shape``, from the broker's ``history_page``,
    ``history_floor`` (their ``_by_time`` variants when ``shape.by_time``) and
    ``history_filters``: their ``/*window*/``, ``/*floor*/`` and ``/*checks*/`` comments
    replaced by the lines ``shape`` takes."""
    suffix = "_by_time" if shape.by_time else ""
    filters = filter_lines(statements["history_filters"])
    window = "\n  ".join(filters["window", f] for f in sorted(shape.window) if f != "until")
    floor = statements["history_floor" + suffix].replace("/*window*/", window)
    inner = floor.rstrip().rstrip(";")
    if not shape.capped:
        bound = ""
    elif shape.by_time:
        bound = (
            f"AND (finished_at, seq) >= (coalesce((SELECT finished_at FROM ({inner}) f), -1),"
            f" coalesce((SELECT seq FROM ({inner}) f), -1))"
        )
    else:
        bound = f"AND seq >= coalesce(({inner}), -1)"
    checks = "\n  ".join(filters["check", f] for f in sorted(shape.checks))
    page = statements["history_page" + suffix]
    return page.replace("/*window*/", window).replace("/*floor*/", bound).replace("/*checks*/", checks), floor


def column_values(rows: Sequence[HistoryRow]) -> dict[str, list[Any]]:
    """``rows`` column by column (parameters of an insert from parallel arrays)."""
    return dict(zip(COLUMNS, (list(column) for column in zip(*rows, strict=True)), strict=True))


def query_params(query: HistoryQuery) -> dict[str, Any]:
    """``query`` as the parameters of its page and floor statements."""
    by_time = Shape.of(query).by_time
    cursor, after_time = CURSOR_START, TIME_TOP
    if query.cursor is not None:
        try:
            if by_time:
                when, _, seq = query.cursor.partition("/")
                after_time, cursor = float(when), int(seq)
            else:
                cursor = int(query.cursor)
        except ValueError:
            raise ValueError(f"history cursor {query.cursor!r} is not one this broker issued") from None
    until = TIME_TOP if query.until is None else math.nextafter(query.until, -math.inf)
    return {
        "cursor": cursor,
        "after_time": after_time,
        "time_top": min(after_time, until),  # the one upper bound of a time window
        "name": query.name,
        "state": query.state,
        "queue": query.queue,
        "task_id": query.task_id,
        "since": query.since,
        "until": query.until,
        "text": query.text.lower() if query.text else None,
        "limit": query.limit + 1,
        "scan_last": SCAN_MAX - 1,
    }


def _cursor(seq: int, finished_at: float, by_time: bool) -> str:
    return f"{finished_at!r}/{seq}" if by_time else str(seq)


def page_from_rows(
    rows: Sequence[Sequence[Any]], query: HistoryQuery, floor: Sequence[Any] | None = None
) -> HistoryPage:
    """Rows of ``seq, <columns>`` (``limit + 1`` at most) as a page; ``floor``: the floor
    statement's row (``seq`` or ``finished_at, seq``) when the page had checks and came back
    short: the cursor to read on from (None: the window ended)."""
    by_time = Shape.of(query).by_time
    records = [
        HistoryRecord(**dict(zip(COLUMNS, row[1:], strict=True)), cursor=_cursor(row[0], row[5], by_time))
        for row in rows[: query.limit]
    ]
    if len(rows) > query.limit and records:
        return HistoryPage(records, records[-1].cursor)
    if floor is None:
        return HistoryPage(records, None)
    return HistoryPage(records, f"{floor[0]!r}/{floor[1]}" if by_time else str(floor[0]))


def drop_expired(page: HistoryPage, cutoff: float) -> HistoryPage:
    """``page`` without the records that finished before ``cutoff`` (``max_age`` ago): the
    retention trim runs about once per 200 records written, and until it does they stay in
    the table. Such rows are the oldest, so a page that met one is the last."""
    kept = [r for r in page.records if r.finished_at >= cutoff]
    return page if len(kept) == len(page.records) else HistoryPage(kept, None)


def links_statement(parent_id: str | None, group_id: str | None) -> tuple[str, dict[str, Any]]:
    """The name and parameters of the ``history_links_*`` statement for one link."""
    field, value = link_filter(parent_id, group_id)
    return f"history_links_{field.removesuffix('_id')}", {field: value, "scan": LINKS_SCAN}


def links_from_rows(rows: Sequence[Sequence[Any]], cutoff: float) -> list[LinkedTask]:
    """``history_links_*`` rows (task_id, name, state, finished_at, parent_id, group_id),
    newest first, as one :class:`LinkedTask` per task."""
    return linked_tasks((LinkedTask(*row) for row in rows), cutoff)


class HeldRows(HeldHistory[HistoryRow]):
    """Mixin of the SQL brokers: a thread's records are held as rows (:data:`HistoryRow`,
    made by ``history.row_for_settle`` straight from the delivery) and inserted as they are."""

    def _history_settled(self, delivery: Delivery, outcome: Outcome, now: float) -> None:
        """Hold the record of a settle that committed (inserted with a later write)."""
        self._history_buffer().add(row_for_settle(delivery, outcome, now, self.config.history))

    def _history_record(self, delivery: Delivery, outcome: Outcome, now: float) -> HistoryRow | None:
        return row_for_settle(delivery, outcome, now, self.config.history)

    def _as_held(self, records: Sequence[HistoryRecord]) -> list[HistoryRow]:
        return [row_values(r) for r in records]

    def append_history(self, records: Sequence[HistoryRecord]) -> None:
        self._history_buffer().extend(self._as_held(records))
        self._history_flush()
