"""Task history: one compact record per finished delivery, kept by the broker and queried back.

A settle that finishes a delivery (success, failure, retry, dead letter) and a ``revoke`` of
a waiting task leave a :class:`HistoryRecord`. It is built here, from what the broker
already holds at settle time (the :class:`Delivery` and the :class:`Outcome`), so that every
broker records the same fields and the worker pays nothing beyond one small write:

* SQL brokers insert it in the settle's own transaction (``potatoq_history``);
* Redis appends it to a capped stream per deployment, right after the settle script;
* RabbitMQ hands it to its result store (the broker its results live in);
* memory keeps a capped list.

Queries (:class:`HistoryQuery`) filter by name, state, queue, task id, finish-time range and
exception text, newest first, with keyset pagination: a page's ``next_cursor`` is the
position of its last record, and the next page starts strictly after it (no OFFSET, so page
1000 costs what page 1 costs on the SQL brokers' indexes).

Retention (:class:`HistorySettings`): records older than ``max_age`` seconds or beyond the
newest ``max_count`` are dropped, amortised (SQL brokers trim on one settle in
``TRIM_EVERY``). ``enabled=False`` turns recording off.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .. import states
from ..exceptions import ImproperlyConfigured
from ..message import Message
from .records import Complete, DeadLetter, Delivery, Outcome, Requeue, RetryLater

__all__ = [
    "DEAD",
    "HISTORY_STATES",
    "TRIM_EVERY",
    "HistoryBucket",
    "HistoryPage",
    "HistoryQuery",
    "HistoryRecord",
    "HistoryRow",
    "HistorySettings",
    "LinkedTask",
    "for_lost",
    "for_revoke",
    "for_settle",
    "linked_tasks",
    "matches",
    "queue_wait",
    "row_for_settle",
    "should_trim",
    "text_window",
]

#: The state of a dead-lettered delivery (Celery has no name for it).
DEAD = "DEAD"
HISTORY_STATES = (states.SUCCESS, states.FAILURE, states.RETRY, states.REVOKED, DEAD)
#: SQL brokers run their retention trim on about one settle in this many.
TRIM_EVERY = 200
PREVIEW_MAX = 200  # characters of args/result preview kept
EXCEPTION_MAX = 500  # characters of exception message kept

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80
_repr.maxlist = _repr.maxtuple = _repr.maxdict = 8


@dataclasses.dataclass(frozen=True)
class HistorySettings:
    """``task_history`` settings, as the broker sees them."""

    enabled: bool = True
    max_age: float = 7 * 86400.0  # seconds a record is kept
    max_count: int = 1_000_000  # records kept at most (oldest dropped first)
    previews: bool = True  # keep a truncated repr of arguments and result
    redact_kwargs: tuple[str, ...] = ("password", "secret", "token", "api_key")
    trim_every: int = TRIM_EVERY  # SQL brokers trim on about one write in this many
    batch: int = 128  # records a worker thread holds before writing them together (history_buffer)
    flush_after: float = 1.0  # seconds after which a thread writes what it holds, with its next settle

    @classmethod
    def from_settings(cls, conf: Any) -> HistorySettings:
        """From the app's ``task_history*`` settings (``conf`` has them as attributes)."""
        max_age = conf.task_history_max_age
        if hasattr(max_age, "total_seconds"):
            max_age = max_age.total_seconds()
        redact = conf.task_history_redact
        if isinstance(redact, str) or not all(isinstance(k, str) for k in redact):
            raise ImproperlyConfigured(f"task_history_redact must be a list of keyword names, got {redact!r}")
        for name in ("task_history", "task_history_previews"):
            if not isinstance(getattr(conf, name), bool):
                raise ImproperlyConfigured(f"{name} must be True or False, got {getattr(conf, name)!r}")
        if isinstance(conf.task_history_max_count, bool) or not isinstance(conf.task_history_max_count, int):
            raise ImproperlyConfigured(
                f"task_history_max_count must be an int, got {conf.task_history_max_count!r}"
            )
        batch = conf.task_history_batch
        if isinstance(batch, bool) or not isinstance(batch, int):
            raise ImproperlyConfigured(f"task_history_batch must be an int, got {batch!r}")
        if isinstance(max_age, bool) or not isinstance(max_age, int | float):
            raise ImproperlyConfigured(f"task_history_max_age must be seconds (a number), got {max_age!r}")
        return cls(
            enabled=conf.task_history,
            max_age=float(max_age),
            max_count=conf.task_history_max_count,
            previews=conf.task_history_previews,
            redact_kwargs=tuple(redact),
            batch=batch,
        )

    @functools.cached_property
    def redacted(self) -> frozenset[str]:
        """``redact_kwargs`` lowercased (keyword names are matched ignoring case)."""
        return frozenset(k.lower() for k in self.redact_kwargs)

    def __post_init__(self) -> None:
        if self.max_age <= 0:
            raise ImproperlyConfigured(f"task_history_max_age must be > 0 seconds, got {self.max_age!r}")
        if self.max_count < 1:
            raise ImproperlyConfigured(f"task_history_max_count must be >= 1, got {self.max_count!r}")
        if self.batch < 1:
            raise ImproperlyConfigured(f"task_history_batch must be >= 1, got {self.batch!r}")


# Not frozen: a frozen dataclass sets each of its 21 fields through object.__setattr__,
# 3 to 6 µs per record on this project's VM, paid once per finished task (issue 31).
# Treat records as read-only all the same.
@dataclasses.dataclass(slots=True)
class HistoryRecord:
    """One finished delivery of a task (a task retried twice leaves three)."""

    task_id: str
    name: str | None
    queue: str
    state: str
    finished_at: float
    started_at: float | None = None
    enqueued_at: float | None = None  # when it was sent (the ``sent_at`` header)
    due_at: float | None = None  # its eta, when it had one
    runtime: float | None = None  # seconds from claim to settle
    worker: str | None = None
    pid: int | None = None
    deliveries: int = 0
    retries: int = 0
    exc_type: str | None = None
    exc_message: str | None = None
    args_preview: str | None = None
    result_preview: str | None = None
    parent_id: str | None = None
    root_id: str | None = None
    group_id: str | None = None
    cursor: str | None = None  # the record's position, filled in when read back

    @property
    def latency(self) -> float | None:
        """Seconds from due (sent, or its eta if later) to start: the wait in the queue."""
        if self.started_at is None or self.enqueued_at is None:
            return None
        return queue_wait(self.started_at, self.enqueued_at, self.due_at)

    def to_json(self) -> dict[str, Any]:
        # Every field is a scalar: no dataclasses.asdict (its deep copy was most of the
        # cost of history on a worker's processed/s).
        return {name: getattr(self, name) for name in _RECORD_FIELDS}

    def encode(self) -> bytes:
        return _ENCODER.encode(self.to_json()).encode()

    @classmethod
    def decode(cls, data: bytes | str, cursor: str | None = None) -> HistoryRecord:
        body = json.loads(data)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in body.items() if k in names}, cursor=cursor)


def queue_wait(started_at: float, enqueued_at: float, due_at: float | None) -> float:
    """Seconds from due (sent at ``enqueued_at``, or its eta ``due_at`` if later) to
    ``started_at``: a record's enqueue-to-start latency (never below 0)."""
    return max(0.0, started_at - max(enqueued_at, due_at or 0.0))


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(HistoryRecord) if f.name != "cursor")
# One encoder, made once: json.dumps with separators makes a new one per call. Records
# hold scalars only, so there is no cycle to check for.
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)


@dataclasses.dataclass(frozen=True)
class HistoryQuery:
    """Filters for :meth:`Broker.history`; every one given must match."""

    name: str | None = None
    state: str | None = None
    queue: str | None = None
    task_id: str | None = None
    since: float | None = None  # finished at or after (epoch seconds)
    until: float | None = None  # finished before
    text: str | None = None  # substring of the exception type or message (case-insensitive)
    limit: int = 50
    cursor: str | None = None  # a page's ``next_cursor``: records after it

    def __post_init__(self) -> None:
        if not isinstance(self.limit, int) or not 1 <= self.limit <= 1000:
            raise ValueError(f"history limit must be an int from 1 to 1000, got {self.limit!r}")
        if self.state is not None and self.state not in HISTORY_STATES:
            raise ValueError(f"unknown history state {self.state!r}: use one of {', '.join(HISTORY_STATES)}")
        if self.cursor is not None and not (isinstance(self.cursor, str) and self.cursor):
            raise ValueError(f"history cursor must be a non-empty string, got {self.cursor!r}")


@dataclasses.dataclass(frozen=True)
class HistoryPage:
    records: list[HistoryRecord]
    next_cursor: str | None  # None: this was the last page


@dataclasses.dataclass
class HistoryBucket:
    """What finished in one time bucket (the dashboard's charts): the records, those that
    finished (SUCCESS, REVOKED) and failed (FAILURE, DEAD), nearest-rank p50 / p95 / p99
    and the means of latency and runtime (None: no sample). From rollups
    (:mod:`~potatoq.brokers.history_rollup`) a percentile is within its bucket error."""

    records: int = 0
    finished: int = 0
    failed: int = 0
    latency_p50: float | None = None
    latency_p95: float | None = None
    runtime_p50: float | None = None
    runtime_p95: float | None = None
    latency_p99: float | None = None
    runtime_p99: float | None = None
    latency_mean: float | None = None
    runtime_mean: float | None = None


def matches(record: HistoryRecord, query: HistoryQuery) -> bool:
    """True if ``record`` passes every filter of ``query`` (cursor and limit aside)."""
    if query.name is not None and record.name != query.name:
        return False
    if query.state is not None and record.state != query.state:
        return False
    if query.queue is not None and record.queue != query.queue:
        return False
    if query.task_id is not None and record.task_id != query.task_id:
        return False
    if query.since is not None and record.finished_at < query.since:
        return False
    if query.until is not None and record.finished_at >= query.until:
        return False
    if query.text:
        haystack = f"{record.exc_type or ''} {record.exc_message or ''}".lower()
        if query.text.lower() not in haystack:
            return False
    return True


def text_window(query: HistoryQuery) -> bool:
    """Whether only the records with an exception can match ``query``'s exception text, so
    a broker may read just those (an index of them): any text but a lone space, which the
    haystack of a record without one (``" "``, see :func:`matches`) holds too."""
    return bool(query.text) and query.text != " "


def page_of(records: Iterable[HistoryRecord], query: HistoryQuery) -> HistoryPage:
    """The first ``query.limit`` matches of ``records`` (given newest first, after the cursor)."""
    found: list[HistoryRecord] = []
    for record in records:
        if matches(record, query):
            found.append(record)
            if len(found) > query.limit:
                break
    more = len(found) > query.limit
    found = found[: query.limit]
    return HistoryPage(found, found[-1].cursor if more and found else None)


#: Tasks one :meth:`Broker.history_links` call returns at most, and records it reads at most.
LINKS_MAX = 200
LINKS_SCAN = 2000


@dataclasses.dataclass(frozen=True)
class LinkedTask:
    """A task tied to another by its history records (a child: its ``parent_id`` is the
    other's id; a group member: its ``group_id`` is the group's), as its newest record says."""

    task_id: str
    name: str | None
    state: str
    finished_at: float
    parent_id: str | None = None
    group_id: str | None = None


def linked_tasks(newest_first: Iterable[LinkedTask], cutoff: float = 0.0) -> list[LinkedTask]:
    """One per task (its newest record; ``newest_first`` is in that order), none that
    finished before ``cutoff`` (past ``max_age``, not trimmed yet), in the order they
    finished, ``LINKS_MAX`` at most."""
    seen: dict[str, LinkedTask] = {}
    for link in newest_first:
        if link.task_id not in seen and link.finished_at >= cutoff:
            seen[link.task_id] = link
    return sorted(seen.values(), key=lambda t: (t.finished_at, t.task_id))[:LINKS_MAX]


def link_filter(parent_id: str | None, group_id: str | None) -> tuple[str, str]:
    """``("parent_id", id)`` or ``("group_id", id)``: the one link a ``history_links`` call asks for."""
    if (parent_id is None) == (group_id is None):
        raise ValueError("history_links takes one of parent_id= or group_id=")
    return ("parent_id", parent_id) if parent_id is not None else ("group_id", str(group_id))


def link_of(record: HistoryRecord) -> LinkedTask:
    return LinkedTask(
        record.task_id, record.name, record.state, record.finished_at, record.parent_id, record.group_id
    )


def should_trim(settings: HistorySettings, written: int = 1) -> bool:
    """Whether a write of ``written`` records also trims: about once per ``trim_every`` records."""
    return settings.trim_every <= written or random.random() * settings.trim_every < written


# ----------------------------------------------------------------------------- building


def _cut(text: str) -> str:
    return text if len(text) <= PREVIEW_MAX else text[: PREVIEW_MAX - 1] + "…"


def _preview(value: Any) -> str:
    plain = _plain(value)
    return _cut(plain if plain is not None else _repr.repr(value))


# Values whose plain repr() is what ``_repr`` gives when it is at most _PLAIN_MAX long (the
# common arguments: ids, counts, names). Building the preview from them directly costs a
# tenth of walking reprlib's recursion, once per finished task (issue 31).
_PLAIN_TYPES = frozenset({type(None), bool, int, float, str})
_PLAIN_MAX = 40  # within reprlib's limits (maxlong 40, maxstring and maxother 80)


def _plain(value: Any) -> str | None:
    """``repr(value)`` for a short scalar; None for anything else."""
    if type(value) in _PLAIN_TYPES:
        text = repr(value)
        if len(text) <= _PLAIN_MAX:
            return text
    return None


def _plain_call(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """What ``_repr.repr((tuple(args), dict(kwargs)))`` gives, when every argument is a short
    scalar and there are at most ``maxtuple`` / ``maxdict`` of them; else None."""
    if len(args) > _repr.maxtuple or len(kwargs) > _repr.maxdict:
        return None
    parts: list[str] = []
    for arg in args:
        shown = _plain(arg)
        if shown is None:
            return None
        parts.append(shown)
    items: list[str] = []
    for key in sorted(kwargs):  # reprlib sorts a dict's keys
        shown_key, shown_value = _plain(key), _plain(kwargs[key])
        if shown_key is None or shown_value is None:
            return None
        items.append(f"{shown_key}: {shown_value}")
    trailing = "," if len(parts) == 1 else ""
    return f"(({', '.join(parts)}{trailing}), {{{', '.join(items)}}})"


def args_preview(message: Message | None, settings: HistorySettings) -> str | None:
    """The preview of ``message``'s arguments, keyword arguments named in
    ``settings.redact_kwargs`` shown as ``[redacted]``; None with previews off."""
    if message is None or not settings.previews:
        return None
    kwargs: Mapping[str, Any] = message.kwargs
    if kwargs:
        hidden = settings.redacted
        kwargs = {k: ("[redacted]" if k.lower() in hidden else v) for k, v in kwargs.items()}
    args = tuple(message.args)
    plain = _plain_call(args, kwargs)
    return _cut(plain if plain is not None else _repr.repr((args, kwargs)))


def _exception(payload: Any) -> tuple[str | None, str | None]:
    if isinstance(payload, Mapping) and "exc_type" in payload:
        message = payload.get("exc_message")
        if isinstance(message, list | tuple):
            message = ", ".join(str(m) for m in message)
        return str(payload["exc_type"]), str(message or "")[:EXCEPTION_MAX]
    return None, None


def _reason(reason: str) -> tuple[str | None, str | None]:
    """``"ValueError: boom"`` → ``("ValueError", "boom")`` (the executor's dead-letter reason)."""
    head, sep, rest = reason.partition(": ")
    if sep and head.replace(".", "").replace("_", "").isalnum() and " " not in head:
        return head, rest[:EXCEPTION_MAX]
    return None, reason[:EXCEPTION_MAX]


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _outcome_fields(
    outcome: Outcome, settings: HistorySettings
) -> tuple[str, str | None, str | None, str | None]:
    """The state, exception type and message, and result preview a settle with ``outcome``
    records."""
    result = getattr(outcome, "result", None)
    exc_type: str | None = None
    exc_message: str | None = None
    result_preview: str | None = None
    if isinstance(outcome, DeadLetter):
        state = DEAD
        exc_type, exc_message = _exception(result.result) if result is not None else (None, None)
        if exc_type is None:
            exc_type, exc_message = _reason(outcome.reason)
    elif isinstance(outcome, RetryLater):
        state = states.RETRY
        if outcome.error is not None:
            exc_type, exc_message = outcome.error[0], outcome.error[1][:EXCEPTION_MAX]
        elif result is not None:
            exc_type, exc_message = _exception(result.result)
    elif isinstance(outcome, Complete):
        state = result.state if result is not None else states.SUCCESS
        if outcome.error is not None:  # a failure in ``throws``: no result may be stored
            state = states.FAILURE
            exc_type, exc_message = outcome.error[0], outcome.error[1][:EXCEPTION_MAX]
        elif state not in HISTORY_STATES:
            state = states.SUCCESS  # a custom state written by update_state: the task finished
        if result is not None and state == states.SUCCESS:
            result_preview = _preview(result.result) if settings.previews else None
        elif result is not None and exc_type is None:
            exc_type, exc_message = _exception(result.result)
    else:
        raise TypeError(f"unknown outcome {outcome!r}")
    return state, exc_type, exc_message, result_preview


#: A record as the SQL brokers hold and insert it: :class:`HistoryRecord`'s fields in
#: their order, ``cursor`` aside (``HistoryRecord(*row)`` is the record).
HistoryRow = tuple[Any, ...]


def row_for_settle(
    delivery: Delivery, outcome: Outcome, now: float, settings: HistorySettings
) -> HistoryRow | None:
    """The record a settle of ``delivery`` with ``outcome`` leaves, as a :data:`HistoryRow`;
    None when it leaves none (history off, or a :class:`Requeue`: the task isn't finished).

    Made as a plain tuple, straight from the delivery: the SQL brokers insert it as it is.
    Building a :class:`HistoryRecord` first and reading its fields back made building a
    record 6.6 µs instead of 4.8 (``make bench-history-layouts``), paid on every finished
    task (issue 31)."""
    if not settings.enabled or isinstance(outcome, Requeue):
        return None
    if type(outcome) is Complete and outcome.result is None and outcome.error is None:
        state, exc_type, exc_message, result_preview = states.SUCCESS, None, None, None  # no stored result
    else:
        state, exc_type, exc_message, result_preview = _outcome_fields(outcome, settings)
    claimed_at = delivery.claimed_at
    worker = delivery.worker
    message = delivery.message
    if message is None:  # undecodable: what the delivery alone says
        return (
            delivery.id, None, delivery.queue, state, now, claimed_at, None, None,
            max(0.0, now - claimed_at), worker.node, worker.pid, delivery.deliveries, 0,
            exc_type, exc_message, None, result_preview, None, None, None,
        )  # fmt: skip
    headers = message.headers
    sent_at = headers.get("sent_at")
    return (
        delivery.id, message.task, delivery.queue, state, now, claimed_at,
        sent_at if type(sent_at) is float else _float(sent_at), message.eta,
        max(0.0, now - claimed_at), worker.node, worker.pid, delivery.deliveries,
        message.retries, exc_type, exc_message, args_preview(message, settings),
        result_preview, headers.get("parent_id"), headers.get("root_id"), headers.get("group_id"),
    )  # fmt: skip


def for_settle(
    delivery: Delivery, outcome: Outcome, now: float, settings: HistorySettings
) -> HistoryRecord | None:
    """:func:`row_for_settle`'s record as a :class:`HistoryRecord`."""
    row = row_for_settle(delivery, outcome, now, settings)
    return None if row is None else HistoryRecord(*row)


def for_revoke(
    task_id: str, name: str | None, queue: str, now: float, settings: HistorySettings
) -> HistoryRecord | None:
    """The record a ``revoke`` that removed a waiting task leaves (it never started)."""
    if not settings.enabled:
        return None
    return HistoryRecord(task_id=task_id, name=name, queue=queue, state=states.REVOKED, finished_at=now)


def for_lost(
    task_id: str,
    name: str | None,
    queue: str,
    deliveries: int,
    reason: str,
    now: float,
    settings: HistorySettings,
) -> HistoryRecord | None:
    """The record of a task ``recover`` dead-lettered because its workers kept dying."""
    if not settings.enabled:
        return None
    exc_type, exc_message = _reason(reason)
    return HistoryRecord(
        task_id=task_id,
        name=name,
        queue=queue,
        state=DEAD,
        finished_at=now,
        deliveries=deliveries,
        exc_type=exc_type,
        exc_message=exc_message,
    )


def sorted_newest_first(records: Sequence[HistoryRecord]) -> list[HistoryRecord]:
    return sorted(records, key=lambda r: (r.finished_at, r.cursor or ""), reverse=True)
