"""Per-minute rollups of task history: what the dashboard's charts read (issue 31).

Aggregating the records of a chart's window on each request read every record of it (an
hour: ~70,000 rows at a busy deployment's rate, 0.15 to 1.5 s at 10 million records), so
the brokers that keep history also keep, for every (minute, task name), what the charts
need: written with the records themselves on SQLite and PostgreSQL (the same
transaction), built from the history stream in bulk on Redis (``history_rollup_build.lua``
after a cursor: the same fields, the same buckets, off the settle path):

* the records by state (SUCCESS, FAILURE, RETRY, REVOKED, DEAD);
* for runtime and for enqueue-to-start latency: how many samples, their sum (the mean),
  and a histogram of them in fixed log-scale buckets (:func:`bucket_of`), from which
  percentiles are read (:func:`percentile`).

Name ``ALL`` (``""``) holds every task's totals for the minute (records without a name
count there only), so a chart of every task reads one row per minute, not one per name.
Each is also kept per hour (``HOUR``), so a chart of days reads one row per hour (a
7-day chart: 168 rows, not 10,080).

The buckets: bucket 0 holds values under ``BASE`` (10 µs), bucket ``b >= 1`` values in
``[BASE * G**(b-1), BASE * G**b)`` with ``G = 2**(1/4)``, up to ``TOP`` (the last one
holds everything above, ~110 days). A percentile is the geometric middle of the bucket
that holds the nearest-rank sample (the ``ceil(q * n)``-th smallest): within ``ERROR``
(9.1 %) of it, or 5 µs under ``BASE``.

A histogram travels as a small JSON object ``{"<bucket>": count}`` (only the buckets
used), which the SQL brokers merge in their upsert; on Redis it is hash fields
``r<bucket>`` / ``l<bucket>``, counted by the build script, which computes
:func:`bucket_of` the same way, to the bit (test_history_rollup_build.py checks).
Records are grouped per write on the SQL brokers (:func:`rollups_of`), so a batch of
``task_history_batch`` records costs one upsert per distinct (minute, name) of the
batch, not one per record.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from .history import HistoryBucket, HistoryRecord, HistoryRow, queue_wait

__all__ = [
    "ALL",
    "BASE",
    "ERROR",
    "HOUR",
    "MINUTE",
    "STATES",
    "STATE_COLUMNS",
    "Keyed",
    "Rollup",
    "bucket_of",
    "buckets_from_rollups",
    "decode_fields",
    "percentile",
    "rollup_fields",
    "rollup_row",
    "rollup_values",
    "rollups_of",
    "sample_of",
    "sample_of_row",
    "value_of",
]

ALL = ""  # the name of the every-task rollup
BASE = 1e-5  # seconds: the top of bucket 0
PER_DOUBLING = 4  # buckets per doubling of the value
GROWTH = 2.0 ** (1 / PER_DOUBLING)
TOP = 160  # the last bucket (BASE * GROWTH**159 is ~110 days)
ERROR = math.sqrt(GROWTH) - 1  # a percentile's largest relative error (bucket 1 and up)
#: The states counted, in the order of a rollup's ``states`` (and the SQL columns).
STATES = ("SUCCESS", "FAILURE", "RETRY", "REVOKED", "DEAD")
_STATE_INDEX = {s: i for i, s in enumerate(STATES)}
STATE_COLUMNS = ("success", "failure", "retry", "revoked", "dead")  # the SQL columns, the hash fields
_STATE_COLUMN_INDEX = {c: i for i, c in enumerate(STATE_COLUMNS)}


# Bucket boundaries within a doubling: 2**(1/4), 2**(1/2), 2**(3/4), made of square roots
# and a product (IEEE-exact operations) so that Redis' Lua gets the same doubles.
_Q2 = math.sqrt(2.0)
_Q1 = math.sqrt(_Q2)
_Q3 = _Q2 * _Q1
_WIDE = 2.0**40  # value / BASE from which every value is in TOP


def bucket_of(seconds: float) -> int:
    """The histogram bucket of a value (seconds, >= 0).

    ``1 + floor(4 * log2(seconds / BASE))``, computed with exact operations only (a
    division, ``frexp``, comparisons), not ``log2``: ``history_rollup_build.lua`` computes
    it on the Redis server, and both must agree on every value, boundaries included."""
    if not seconds >= BASE:
        return 0
    x = seconds / BASE
    if x >= _WIDE:
        return TOP
    m, e = math.frexp(x)  # x = m * 2**e, 0.5 <= m < 1
    m *= 2
    q = 0 if m < _Q1 else 1 if m < _Q2 else 2 if m < _Q3 else 3
    return min(TOP, PER_DOUBLING * (e - 1) + q + 1)


def value_of(bucket: int) -> float:
    """What a bucket stands for: the geometric middle of its range (``BASE / 2`` for 0)."""
    if bucket <= 0:
        return BASE / 2
    return float(BASE * GROWTH ** (bucket - 0.5))


@dataclasses.dataclass(slots=True)
class Rollup:
    """One (minute, name): records by state (``STATES`` order), and for runtime and
    latency the samples, their sum (seconds) and their histogram (bucket -> count)."""

    states: list[int] = dataclasses.field(default_factory=lambda: [0] * len(STATES))
    run_n: int = 0
    run_sum: float = 0.0
    run_hist: dict[int, int] = dataclasses.field(default_factory=dict)
    lat_n: int = 0
    lat_sum: float = 0.0
    lat_hist: dict[int, int] = dataclasses.field(default_factory=dict)

    def merge(self, other: Rollup) -> None:
        for i, n in enumerate(other.states):
            self.states[i] += n
        self.run_n += other.run_n
        self.run_sum += other.run_sum
        self.lat_n += other.lat_n
        self.lat_sum += other.lat_sum
        for mine, theirs in ((self.run_hist, other.run_hist), (self.lat_hist, other.lat_hist)):
            for b, n in theirs.items():
                mine[b] = mine.get(b, 0) + n

    def row(self) -> tuple[Any, ...]:
        """The SQL upsert's values after (minute, name): states, then runtime's and
        latency's n, sum and histogram (JSON)."""
        return (
            *self.states,
            self.run_n,
            self.run_sum,
            encode_hist(self.run_hist),
            self.lat_n,
            self.lat_sum,
            encode_hist(self.lat_hist),
        )


#: What a record contributes: (name, state, finished_at, runtime, latency).
Sample = tuple[str | None, str, float, float | None, float | None]


def sample_of(record: HistoryRecord) -> Sample:
    """A full record's sample: runtime only for a record that ran (as the charts count)."""
    runtime = record.runtime if record.started_at is not None else None
    return record.name, record.state, record.finished_at, runtime, record.latency


def sample_of_row(row: HistoryRow) -> Sample:
    """:func:`sample_of` of ``HistoryRecord(*row)``, read from the row's places (name 1,
    state 3, finished 4, started 5, enqueued 6, due 7, runtime 8)."""
    started_at = row[5]
    if started_at is None:
        return row[1], row[3], row[4], None, None
    enqueued_at = row[6]
    latency = None if enqueued_at is None else queue_wait(started_at, enqueued_at, row[7])
    return row[1], row[3], row[4], row[8], latency


class Keyed(NamedTuple):
    """A rollup and what it rolls up: ``span`` minutes (``MINUTE`` or ``HOUR``) from
    ``minute`` (minutes since the epoch), of task ``name`` (``ALL``: every task)."""

    span: int
    minute: int
    name: str
    rollup: Rollup


MINUTE, HOUR = 1, 60  # the two spans kept: minutes for charts up to hours, hours for days


def rollups_of(samples: Iterable[Sample]) -> list[Keyed]:
    """The rollups of some records: per minute and per hour, of each name and of ``ALL``,
    sorted by (name, span, minute): writers that upsert in one order can't deadlock on
    each other's rows.

    Run once per batch written, on the worker: each value is bucketed once; the ``ALL``
    and hourly rollups are merged from the per-name minutes (a few per batch)."""
    found: dict[tuple[str, int, int], Rollup] = {}
    for name, state, finished_at, runtime, latency in samples:
        key = (name or ALL, MINUTE, int(finished_at // 60))
        r = found.get(key)
        if r is None:
            r = found[key] = Rollup()
        index = _STATE_INDEX.get(state)
        if index is not None:
            r.states[index] += 1
        if runtime is not None:
            r.run_n += 1
            r.run_sum += runtime
            b = bucket_of(runtime)
            r.run_hist[b] = r.run_hist.get(b, 0) + 1
        if latency is not None:
            r.lat_n += 1
            r.lat_sum += latency
            b = bucket_of(latency)
            r.lat_hist[b] = r.lat_hist.get(b, 0) + 1
    # ALL's own minutes (records without a name) first: named ones are merged into them next
    for (name, _, minute), r in sorted(found.items(), key=lambda item: item[0]):
        into = [(name, HOUR, minute - minute % HOUR)]
        if name != ALL:
            into += [(ALL, MINUTE, minute), (ALL, HOUR, minute - minute % HOUR)]
        for key in into:
            total = found.get(key)
            if total is None:
                total = found[key] = Rollup()
            total.merge(r)
    return [Keyed(span, minute, name, found[name, span, minute]) for name, span, minute in sorted(found)]


ROLLUP_COLUMNS = (*STATE_COLUMNS, "run_n", "run_sum", "run_hist",
                  "lat_n", "lat_sum", "lat_hist")  # fmt: skip


def rollup_values(rollups: Sequence[Keyed]) -> dict[str, list[Any]]:
    """``rollups`` column by column, as ``r_<column>`` parameters (PostgreSQL's unnest)."""
    rows = [rollup_row(k) for k in rollups]
    columns = zip(*rows, strict=True) if rows else [()] * (3 + len(ROLLUP_COLUMNS))
    names = ("name", "span", "minute", *ROLLUP_COLUMNS)
    return {f"r_{c}": list(v) for c, v in zip(names, columns, strict=True)}


def rollup_row(k: Keyed) -> tuple[Any, ...]:
    """The SQL upsert's positional values: name, span, minute, then :meth:`Rollup.row`."""
    return (k.name, k.span, k.minute, *k.rollup.row())


# Redis: a rollup is a HASH of the SQL columns' fields (sums in whole microseconds, for
# HINCRBY) and "r<bucket>" / "l<bucket>" histogram counts.


def rollup_fields(r: Rollup) -> list[str | int]:
    """``r`` as (field, increment) pairs of a Redis rollup hash (zero ones left out)."""
    out: list[str | int] = []
    for state, n in zip(STATE_COLUMNS, r.states, strict=True):
        if n:
            out += (state, n)
    if r.run_n:
        out += ("run_n", r.run_n, "run_sum", round(r.run_sum * 1e6))
        for b, n in r.run_hist.items():
            out += (f"r{b}", n)
    if r.lat_n:
        out += ("lat_n", r.lat_n, "lat_sum", round(r.lat_sum * 1e6))
        for b, n in r.lat_hist.items():
            out += (f"l{b}", n)
    return out


def decode_fields(flat: Sequence[bytes]) -> Rollup:
    """A Redis rollup hash (an HGETALL reply: field, value, ...) as a :class:`Rollup`."""
    r = Rollup()
    for i in range(0, len(flat), 2):
        field, n = flat[i].decode(), int(flat[i + 1])
        head = field[0]
        if head == "r" and field[1:].isdigit():
            r.run_hist[int(field[1:])] = n
        elif head == "l" and field[1:].isdigit():
            r.lat_hist[int(field[1:])] = n
        elif field in _STATE_COLUMN_INDEX:
            r.states[_STATE_COLUMN_INDEX[field]] = n
        elif field == "run_n":
            r.run_n = n
        elif field == "run_sum":
            r.run_sum = n / 1e6
        elif field == "lat_n":
            r.lat_n = n
        elif field == "lat_sum":
            r.lat_sum = n / 1e6
    return r


def encode_hist(hist: Mapping[int, int]) -> str:
    """``{"<bucket>":count,...}`` (ints only: no JSON encoder needed)."""
    return "{" + ",".join([f'"{b}":{n}' for b, n in hist.items()]) + "}"


def decode_hist(text: str | bytes | Mapping[str, Any] | None) -> dict[int, int]:
    """A histogram as stored: JSON text, or (PostgreSQL's jsonb) already a dict."""
    if not text:
        return {}
    body = text if isinstance(text, Mapping) else json.loads(text)
    return {int(b): int(n) for b, n in body.items()}


def percentile(hist: Mapping[int, int], q: float) -> float | None:
    """The nearest-rank ``q`` percentile of a histogram (its bucket's middle); None: empty."""
    total = sum(hist.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return value_of(b)
    return value_of(max(hist))  # unreachable: the counts add up to total


def buckets_from_rollups(
    rollups: Iterable[tuple[int, Rollup]], start: float, step: float, buckets: int
) -> dict[int, HistoryBucket]:
    """Chart buckets of ``step`` seconds from ``start`` from ``(minute, rollup)`` pairs
    (minutes or hours, each starting at its minute): counts, nearest-rank p50 / p95 / p99
    and means of runtime and latency. A rollup starting outside the window is left out."""
    merged: dict[int, Rollup] = {}
    for minute, rollup in rollups:
        index = int((minute * 60 - start) // step)
        if not 0 <= index < buckets:
            continue
        into = merged.get(index)
        if into is None:
            merged[index] = rollup
        else:
            into.merge(rollup)
    return {index: bucket_of_rollup(r) for index, r in merged.items()}


def bucket_of_rollup(r: Rollup) -> HistoryBucket:
    success, failure, _retry, revoked, dead = r.states
    return HistoryBucket(
        records=sum(r.states),
        finished=success + revoked,
        failed=failure + dead,
        latency_p50=percentile(r.lat_hist, 0.5),
        latency_p95=percentile(r.lat_hist, 0.95),
        runtime_p50=percentile(r.run_hist, 0.5),
        runtime_p95=percentile(r.run_hist, 0.95),
        latency_p99=percentile(r.lat_hist, 0.99),
        runtime_p99=percentile(r.run_hist, 0.99),
        latency_mean=r.lat_sum / r.lat_n if r.lat_n else None,
        runtime_mean=r.run_sum / r.run_n if r.run_n else None,
    )


def rollup_of_row(row: Sequence[Any]) -> tuple[int, Rollup]:
    """``(minute, rollup)`` from a SQL row: minute, the five states, run n, sum, histogram,
    lat n, sum, histogram (the ``history_rollups`` statement's columns)."""
    minute, s0, s1, s2, s3, s4, run_n, run_sum, run_hist, lat_n, lat_sum, lat_hist = row
    return int(minute), Rollup(
        [s0, s1, s2, s3, s4],
        int(run_n),
        float(run_sum),
        decode_hist(run_hist),
        int(lat_n),
        float(lat_sum),
        decode_hist(lat_hist),
    )


def window_minutes(start: float, step: float, buckets: int) -> tuple[int, int, int]:
    """The rollups a chart window reads: their span (``HOUR`` when its buckets are whole,
    aligned hours, else ``MINUTE``) and the minutes ``[lo, hi)`` they start in."""
    span = HOUR if step % 3600 == 0 and start % 3600 == 0 else MINUTE
    return span, int(start // 60), math.ceil((start + step * buckets) / 60)
