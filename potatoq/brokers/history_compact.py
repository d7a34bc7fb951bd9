"""Compact task-history records: what a settle knows, plus the task's own payload (issue 31).

A full :class:`~potatoq.brokers.history.HistoryRecord` costs a worker 10 to 20 µs per
task to build and encode (21 fields, an argument preview through ``reprlib``, JSON), most
of what history cost on Redis, where the settle itself is only about 120 µs of CPU. Most
of those fields are already in the bytes the worker received: the payload carries the
task's name, arguments, eta, retries and its ``sent_at``, ``parent_id``, ``root_id`` and
``group_id`` headers. So a broker that can store bytes as they are (Redis) holds a
:data:`CompactRecord` instead: a plain tuple of the payload and the few facts only the
settle knows. :func:`record_of` builds the full record from it when history is *read*,
argument preview included, with the reader's ``task_history_redact`` applied.

Secrets never rest in the history store in the clear: a payload with a keyword argument
named in the writer's ``task_history_redact`` is recorded the full way (preview redacted
before it is written), as is one over :data:`RAW_MAX` bytes (so a large argument doesn't
make a large history entry), one that couldn't be decoded, and any record with previews
turned off.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .. import states
from ..exceptions import MessageDecodeError
from ..message import Message
from .history import (
    HistoryRecord,
    HistorySettings,
    _float,
    _outcome_fields,
    args_preview,
    for_settle,
    queue_wait,
)
from .history_rollup import Sample
from .records import Complete, Delivery, Outcome, Requeue

__all__ = [
    "RAW_MAX",
    "CompactRecord",
    "Link",
    "for_settle_compact",
    "link_of",
    "preview_of",
    "record_of",
    "sample_of_compact",
]

#: Payloads up to this many bytes are kept as they are in a compact record.
RAW_MAX = 2048

#: ``("c", meta, payload, link)``: ``meta`` is the task name, state, queue, finish and start
#: times (whole microseconds), deliveries, worker node, pid, enqueue-to-start latency
#: (whole microseconds, ``""`` for none: the per-minute rollups' sample, see
#: history_rollup) and ``extra`` joined by NULs (``extra``: ``""`` or a JSON object of the
#: exception type and message and the result preview, those that are set). Entries
#: written before the latency field have one NUL fewer; :func:`record_of` reads both.
#: These are ``history_append.lua``'s arguments for a record, packed as they are: one
#: string is packed in a fraction of the time of nine arguments (hiredis' cost is mostly
#: per argument). A fourth item, not sent to that script: the record's task-page link
#: (:data:`Link`), or None for a task with neither a parent nor a group.
CompactRecord = tuple[str, str, bytes, "Link | None"]

#: ``history_links.lua``'s arguments for one record: its task id, parent id and group id
#: (``""`` for none), finish time (``repr`` of epoch seconds) and what a task page shows of
#: it (JSON: name, state, parent id, group id). Made at settle, from the message the worker
#: holds decoded: made from the stored payload instead, it cost a full decode of every
#: record of a group or chain (7 % of a Redis worker child's time on a benchmark whose
#: tasks are sent as groups).
Link = tuple[str, Any, Any, str, str]

_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)
_META_NULS = 9


def for_settle_compact(
    delivery: Delivery, outcome: Outcome, now: float, settings: HistorySettings
) -> CompactRecord | HistoryRecord | None:
    """What a settle of ``delivery`` with ``outcome`` leaves to write: a compact record
    when it can be one, else the full record of :func:`~potatoq.brokers.history.for_settle`
    (None: no record)."""
    if not settings.enabled or type(outcome) is Requeue:
        return None
    message = delivery.message
    if message is None or not settings.previews or len(delivery.raw) > RAW_MAX:
        return for_settle(delivery, outcome, now, settings)
    kwargs = message.kwargs
    if kwargs and not settings.redacted.isdisjoint([str(k).lower() for k in kwargs]):
        return for_settle(delivery, outcome, now, settings)  # redacted before it is stored
    if type(outcome) is Complete and outcome.result is None and outcome.error is None:
        state, extra = states.SUCCESS, ""  # a task that returned, without a stored result
    else:
        state, exc_type, exc_message, result_preview = _outcome_fields(outcome, settings)
        shown = {
            k: v
            for k, v in (
                ("exc_type", exc_type),
                ("exc_message", exc_message),
                ("result_preview", result_preview),
            )
            if v is not None
        }
        extra = _ENCODER.encode(shown) if shown else ""
    worker = delivery.worker
    sent_at = _float(message.headers.get("sent_at"))
    latency = "" if sent_at is None else round(queue_wait(delivery.claimed_at, sent_at, message.eta) * 1e6)
    meta = (
        f"{message.task}\0{state}\0{delivery.queue}\0{int(now * 1e6)}\0"
        f"{round(delivery.claimed_at * 1e6)}\0{delivery.deliveries}\0{worker.node}\0{worker.pid}\0"
        f"{latency}\0{extra}"
    )
    if meta.count("\0") != _META_NULS:  # a NUL in a name: not splittable, kept whole
        return for_settle(delivery, outcome, now, settings)
    return ("c", meta, delivery.raw, _link(message, state, now))


def _link(message: Message, state: str, now: float) -> Link | None:
    """The record's :data:`Link`, as :func:`record_of` would read it back (None: none)."""
    headers = message.headers
    finished = int(now * 1e6) / 1e6  # the meta string's whole microseconds
    return link_of(
        message.id, message.task, state, headers.get("parent_id"), headers.get("group_id"), finished
    )


def link_of(
    task_id: str, name: str | None, state: str, parent: Any, group: Any, finished: float
) -> Link | None:
    """A record's :data:`Link` from its fields (None: neither a parent nor a group)."""
    if not (parent or group):
        return None
    shown = _ENCODER.encode([name, state, parent, group])
    return (task_id, parent or "", group or "", repr(finished), shown)


def record_of(
    fields: Mapping[bytes, bytes],
    settings: HistorySettings,
    cursor: str | None = None,
    *,
    preview: bool = True,
) -> HistoryRecord:
    """The full record of a compact one as stored (``history_append.lua``'s fields: ``m``
    the meta string of :data:`CompactRecord`, ``p`` the payload), its argument preview
    redacted by ``settings`` (``preview=False``: left None, for a reader that builds it
    only for the records it keeps, with :func:`preview_of`)."""
    parts = fields[b"m"].decode().split("\0", _META_NULS)
    if len(parts) == _META_NULS:  # written before the latency field
        parts.insert(_META_NULS - 1, "")
    _, state, queue, finished_us, started_us, deliveries, node, pid, _latency, extra_json = parts
    finished = int(finished_us) / 1e6
    started = int(started_us) / 1e6
    extra: dict[str, Any] = json.loads(extra_json) if extra_json else {}
    try:
        message: Message | None = Message.decode(fields[b"p"])
    except MessageDecodeError:  # decoded when written; kept readable whatever happens
        message = None
    headers: Mapping[str, Any] = message.headers if message is not None else {}
    return HistoryRecord(
        task_id=message.id if message is not None else "",
        name=message.task if message is not None else None,
        queue=queue,
        state=state,
        finished_at=finished,
        started_at=started,
        enqueued_at=_float(headers.get("sent_at")),
        due_at=message.eta if message is not None else None,
        runtime=max(0.0, finished - started),
        worker=node,
        pid=int(pid),
        deliveries=int(deliveries),
        retries=message.retries if message is not None else 0,
        exc_type=extra.get("exc_type"),
        exc_message=extra.get("exc_message"),
        args_preview=args_preview(message, settings) if preview else None,
        result_preview=extra.get("result_preview"),
        parent_id=headers.get("parent_id"),
        root_id=headers.get("root_id"),
        group_id=headers.get("group_id"),
        cursor=cursor,
    )


def sample_of_compact(record: CompactRecord) -> Sample:
    """What a compact record adds to the per-minute rollups (history_rollup.sample_of)."""
    name, state, _, finished_us, started_us, _, _, _, latency_us, _ = record[1].split("\0", _META_NULS)
    finished = int(finished_us) / 1e6
    runtime = max(0.0, finished - int(started_us) / 1e6)
    return name, state, finished, runtime, int(latency_us) / 1e6 if latency_us else None


def preview_of(payload: bytes, settings: HistorySettings) -> str | None:
    """The argument preview of a compact record's payload, redacted by ``settings``."""
    try:
        return args_preview(Message.decode(payload), settings)
    except MessageDecodeError:
        return None
