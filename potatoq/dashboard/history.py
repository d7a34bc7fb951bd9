"""The history pages' data: filters from a query string, rows, and chart series.

Everything is read through :meth:`Broker.history` and :meth:`Broker.history_buckets` (so it
survives dashboard restarts and works on every broker). Series are per bucket over a window
(``WINDOWS``: 1 hour in minutes up to 7 days in 2-hour buckets): tasks finished,
enqueue-to-start latency and runtime percentiles (p50, p95, p99) and means, overall or
for one task name, read from the per-minute rollups the broker writes with the records
(SQLite, PostgreSQL, Redis: :mod:`potatoq.brokers.history_rollup`), else aggregated here
from the records; the page draws them as inline SVG and ``/history/series.json`` serves
them to scripts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..brokers.base import Broker, HistoryBucket, HistoryPage, HistoryQuery, HistoryRecord
from ..brokers.history import HISTORY_STATES
from .redact import REDACTED

__all__ = [
    "HISTORY_STATES",
    "FilterError",
    "HistoryQuery",
    "Series",
    "history_page",
    "parse_filters",
    "series",
    "shown_record",
    "window_of",
]

#: Records read at most to draw one chart (newest first); the caption says when it is capped.
SERIES_MAX = 20_000
#: The chart windows the page offers: name -> (span, bucket) seconds: whole minutes, or
#: whole hours for the windows of days (read from the hourly rollups: 24 and 168 rows).
WINDOWS = {"1h": (3600.0, 60.0), "6h": (21600.0, 300.0), "24h": (86400.0, 3600.0), "7d": (604800.0, 7200.0)}
#: name -> (the window, a bucket) in words
WINDOW_LABELS = {
    "1h": ("hour", "minute"),
    "6h": ("6 hours", "5 minutes"),
    "24h": ("24 hours", "hour"),
    "7d": ("7 days", "2 hours"),
}
DEFAULT_WINDOW = "1h"
FILTER_NAMES = ("name", "state", "queue", "since", "until", "text", "task_id", "limit")


class FilterError(ValueError):
    """A history filter in the query string is malformed (the message names it)."""


def _moment(name: str, text: str) -> float:
    """Epoch seconds from ``1764690000``, ``2026-12-05T01:00`` or ``2026-12-05 01:00:00`` (UTC)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise FilterError(
            f"{name}={text!r:.40} is not a time: use epoch seconds or YYYY-MM-DDTHH:MM"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def parse_filters(params: Mapping[str, str], limit: int = 50) -> HistoryQuery:
    """A :class:`HistoryQuery` from the page's query string; blank fields are no filter."""
    given = {k: params.get(k, "").strip() for k in (*FILTER_NAMES, "cursor", "limit")}
    if given["limit"]:
        if not given["limit"].isdigit() or not 1 <= int(given["limit"]) <= 1000:
            raise FilterError(f"limit={given['limit']!r:.40} must be a whole number from 1 to 1000")
        limit = int(given["limit"])
    state = given["state"].upper() or None
    if state is not None and state not in HISTORY_STATES:
        raise FilterError(f"state={given['state']!r:.40} is not one of {', '.join(HISTORY_STATES)}")
    return HistoryQuery(
        name=given["name"] or None,
        state=state,
        queue=given["queue"] or None,
        task_id=given["task_id"] or None,
        since=_moment("since", given["since"]) if given["since"] else None,
        until=_moment("until", given["until"]) if given["until"] else None,
        text=given["text"] or None,
        limit=limit,
        cursor=given["cursor"] or None,
    )


def shown_record(record: HistoryRecord, redact: bool) -> HistoryRecord:
    """``record`` as a page may show it: with ``redact``, previews and exception text hidden."""
    if not redact:
        return record
    return dataclasses.replace(
        record,
        args_preview=REDACTED if record.args_preview else None,
        result_preview=REDACTED if record.result_preview else None,
        exc_message=REDACTED if record.exc_message else None,
    )


def history_page(broker: Broker, query: HistoryQuery, redact: bool) -> HistoryPage:
    page = broker.history(query)
    return HistoryPage([shown_record(r, redact) for r in page.records], page.next_cursor)


@dataclasses.dataclass(frozen=True)
class Series:
    """Per-bucket values, oldest bucket first; ``None`` where a bucket had no sample."""

    start: float
    step: float
    finished: list[int]
    failed: list[int]
    latency_p50: list[float | None]
    latency_p95: list[float | None]
    runtime_p50: list[float | None]
    runtime_p95: list[float | None]
    latency_p99: list[float | None]
    runtime_p99: list[float | None]
    latency_mean: list[float | None]
    runtime_mean: list[float | None]
    records: int  # records the series were computed from
    capped: bool  # True when SERIES_MAX records were read before the window's start

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def window_of(params: Mapping[str, str]) -> str:
    """The chart window a query string asks for (``window=6h``); the default if none."""
    window = params.get("window", "").strip() or DEFAULT_WINDOW
    if window not in WINDOWS:
        raise FilterError(f"window={window!r:.40} is not one of {', '.join(WINDOWS)}")
    return window


def series(
    broker: Broker, now: float, *, span: float = 3600.0, step: float = 60.0, name: str | None = None
) -> Series:
    """Throughput, latency and runtime percentiles per ``step`` over the last ``span``
    seconds. The buckets are whole minutes (as the rollups), or whole hours when ``step``
    is, the last one ending with the current minute (hour)."""
    buckets = max(1, int(span // step))
    unit = 3600 if step % 3600 == 0 else 60
    start = (math.floor(now / unit) + 1) * unit - buckets * step
    aggregated = broker.history_buckets(start, step, buckets, name)
    if aggregated is not None:  # from the broker's per-minute rollups
        empty = HistoryBucket()
        rows = [aggregated.get(i, empty) for i in range(buckets)]
        return Series(
            start=start,
            step=step,
            finished=[b.finished for b in rows],
            failed=[b.failed for b in rows],
            latency_p50=[b.latency_p50 for b in rows],
            latency_p95=[b.latency_p95 for b in rows],
            runtime_p50=[b.runtime_p50 for b in rows],
            runtime_p95=[b.runtime_p95 for b in rows],
            latency_p99=[b.latency_p99 for b in rows],
            runtime_p99=[b.runtime_p99 for b in rows],
            latency_mean=[b.latency_mean for b in rows],
            runtime_mean=[b.runtime_mean for b in rows],
            records=sum(b.records for b in rows),
            capped=False,
        )
    return series_of_records(broker, start, step, buckets, name)


def series_of_records(broker: Broker, start: float, step: float, buckets: int, name: str | None) -> Series:
    """:func:`series` from the records themselves, newest first, ``SERIES_MAX`` at most
    (brokers without rollups: memory, RabbitMQ without a result backend's)."""
    finished = [0] * buckets
    failed = [0] * buckets
    latencies: list[list[float]] = [[] for _ in range(buckets)]
    runtimes: list[list[float]] = [[] for _ in range(buckets)]
    seen = 0
    cursor: str | None = None
    while seen < SERIES_MAX:
        page = broker.history(HistoryQuery(name=name, since=start, limit=1000, cursor=cursor))
        for record in page.records:
            seen += 1
            index = int((record.finished_at - start) // step)
            if not 0 <= index < buckets:
                continue
            if record.state in ("FAILURE", "DEAD"):
                failed[index] += 1
            elif record.state != "RETRY":
                finished[index] += 1
            if record.latency is not None:
                latencies[index].append(record.latency)
            if record.runtime is not None and record.started_at is not None:
                runtimes[index].append(record.runtime)
        cursor = page.next_cursor
        if cursor is None:
            break
    return Series(
        start=start,
        step=step,
        finished=finished,
        failed=failed,
        latency_p50=[_percentile(v, 0.5) for v in latencies],
        latency_p95=[_percentile(v, 0.95) for v in latencies],
        runtime_p50=[_percentile(v, 0.5) for v in runtimes],
        runtime_p95=[_percentile(v, 0.95) for v in runtimes],
        latency_p99=[_percentile(v, 0.99) for v in latencies],
        runtime_p99=[_percentile(v, 0.99) for v in runtimes],
        latency_mean=[sum(v) / len(v) if v else None for v in latencies],
        runtime_mean=[sum(v) / len(v) if v else None for v in runtimes],
        records=seen,
        capped=cursor is not None,
    )
