"""What the pages show, read only through the broker contract (no broker-specific code).

:class:`Throughput` is the one piece of state the dashboard keeps: a ring of samples of
``queue_stats()`` and of the workers' ``processed`` counters, one every ``every`` seconds
for the last hour, held in this process. It starts empty when the dashboard starts, and
the chart fills in as samples arrive (the broker keeps no history to draw from).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime as dt
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ..brokers.base import Broker, DeadLetterRecord, QueueStats, ResultRecord, WorkerInfo
from ..brokers.estimates import approx
from ..exceptions import MessageDecodeError
from ..message import Message
from ..states import READY_STATES
from ..utils.payload import payload_preview
from . import redact as redaction
from .queued import QueuedView, queued_view
from .redact import REDACTED

__all__ = [
    "REDACTED",
    "DeadLetterView",
    "QueueRow",
    "ScheduleRow",
    "TaskView",
    "Throughput",
    "dead_letters",
    "queue_rows",
    "schedule_rows",
    "task_view",
]

HOUR = 3600.0


@dataclasses.dataclass(frozen=True)
class Sample:
    at: float
    stats: tuple[QueueStats, ...]
    processed: int  # tasks finished since the previous sample, by every live worker


class Throughput:
    """A ring of samples covering the last hour; :meth:`sample` adds one.

    ``processed`` is the sum of each worker node's increase of ``WorkerInfo.processed``
    since the previous sample; a node seen for the first time adds nothing (we don't know
    over which interval its count grew), and a restarted node (count went down) adds its
    new count.
    """

    def __init__(self, broker: Callable[[], Broker], every: float = 10.0) -> None:
        self._broker = broker
        self.every = every
        self.samples: collections.deque[Sample] = collections.deque(
            maxlen=max(2, int(HOUR / every) + 1) if every > 0 else 720
        )
        self._last_counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def sample(self, now: float | None = None) -> Sample:
        broker = self._broker()
        stats = tuple(broker.queue_stats())
        workers = broker.workers()
        with self._lock:
            done = 0
            counts = {}
            for info in workers:
                counts[info.node] = info.processed
                before = self._last_counts.get(info.node)
                if before is not None:
                    done += info.processed - before if info.processed >= before else info.processed
            self._last_counts = counts
            taken = Sample(at=time.time() if now is None else now, stats=stats, processed=done)
            self.samples.append(taken)
        return taken

    def window(self, now: float | None = None) -> list[Sample]:
        """Samples of the last hour, oldest first."""
        since = (time.time() if now is None else now) - HOUR
        with self._lock:
            return [s for s in self.samples if s.at >= since]

    def start(self) -> None:
        """Sample every ``every`` seconds on a daemon thread (idempotent)."""
        with self._lock:
            if self._thread is not None or self.every <= 0:
                return
            self._thread = threading.Thread(target=self._loop, name="potatoq-dashboard-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a broker hiccup leaves a gap, not a dead sampler
                self.sample()
            self._stop.wait(self.every)


# ----------------------------------------------------------------------------- overview


@dataclasses.dataclass(frozen=True)
class QueueRow:
    queue: str
    waiting: int
    delayed: int
    running: int
    oldest_waiting_age: float | None
    paused: bool = False
    estimated: tuple[str, ...] = ()  # "waiting"/"delayed" when that count is an estimate

    def shown(self, field: str) -> str:
        """The count as the page writes it: digits, or ``≈1.2M`` for an estimate."""
        value = int(getattr(self, field))
        return approx(value) if field in self.estimated else str(value)


def queue_rows(stats: Sequence[QueueStats], paused: Collection[str] = ()) -> list[QueueRow]:
    """One row per queue, sorted; a paused queue is listed even with no task in it."""
    by_name = {s.queue: s for s in stats}
    for queue in paused:
        by_name.setdefault(queue, QueueStats(queue, 0, 0, 0, None))
    return [
        QueueRow(
            s.queue, s.waiting, s.delayed, s.running, s.oldest_waiting_age, s.queue in paused, s.estimated
        )
        for s in sorted(by_name.values(), key=lambda s: s.queue)
    ]


def totals(rows: Sequence[QueueRow]) -> dict[str, str]:
    """The overview's cards: each count summed over the queues, ``≈`` when any part is."""
    out = {}
    for field in ("waiting", "delayed", "running"):
        total = sum(int(getattr(r, field)) for r in rows)
        out[field] = approx(total) if any(field in r.estimated for r in rows) else str(total)
    return out


# ----------------------------------------------------------------------------- one task


@dataclasses.dataclass(frozen=True)
class TaskView:
    task_id: str
    record: ResultRecord | None
    dead: DeadLetterRecord | None
    running_on: str | None  # "node pid N" when a live worker reports it running
    running_since: float | None
    args: str
    kwargs: str
    name: str | None
    queued: QueuedView | None = None  # the message as the broker still holds it
    dead_payload: str | None = None  # the dead letter's payload, previewed, if it can't be decoded
    finds_queued: bool = True  # False: the broker can't look a queued task up (RabbitMQ)
    broker_name: str = ""  # for "waiting in <broker>" when it can't

    @property
    def state(self) -> str:
        if self.dead is not None and (self.record is None or self.record.state not in READY_STATES):
            return "DEAD"
        if self.record is not None:
            return self.record.state
        if self.running_on is not None or (self.queued is not None and self.queued.state == "running"):
            return "RUNNING"
        return "PENDING"

    @property
    def ready(self) -> bool:
        return self.state in READY_STATES or self.state == "DEAD"


_shown = redaction.shown


def _undecodable(raw: bytes, message: Message | None, redact: bool) -> str | None:
    """An escaped, shortened preview of a payload that can't be decoded (None if it can)."""
    if message is not None:
        return None
    return REDACTED if redact else payload_preview(raw)


def task_view(
    task_id: str,
    backend: Broker | None,
    broker: Broker,
    workers: Sequence[WorkerInfo],
    *,
    redact: bool,
    dead_scan: int = 500,
) -> TaskView:
    """Everything the contract can tell about one task id."""
    record = backend.get_result(task_id) if backend is not None else None
    finds_queued = broker.capabilities.finds_queued
    queued = None
    # A finished task has left the broker: spare the look-up. A RETRY or STARTED one is
    # still there (scheduled again, or running).
    if finds_queued and (record is None or record.state not in READY_STATES):
        queued = broker.queued_task(task_id)
    dead = next((d for d in broker.list_dead(limit=dead_scan) if d.id == task_id), None)
    running_on = running_since = None
    name = record.name if record else None
    for info in workers:
        for run in info.running:
            if run.task_id == task_id:
                running_on, running_since = f"{info.node} pid {run.pid}", run.started_at
                name = name or run.task
    args: Any = record.args if record else None
    kwargs: Any = record.kwargs if record else None
    if queued is not None and queued.message is not None:
        args = queued.message.args if args is None else args
        kwargs = queued.message.kwargs if kwargs is None else kwargs
        name = name or queued.message.task
    dead_payload = None
    if dead is not None:
        message = _decode(dead.raw, broker)
        if message is not None:
            args = message.args if args is None else args
            kwargs = message.kwargs if kwargs is None else kwargs
        dead_payload = _undecodable(dead.raw, message, redact)
        name = name or dead.task
    if redact:
        record = redaction.record(record)
        dead = redaction.dead_letter(dead) if dead is not None else None
    return TaskView(
        task_id=task_id,
        record=record,
        dead=dead,
        running_on=running_on,
        running_since=running_since,
        args=_shown(args, redact),
        kwargs=_shown(kwargs, redact),
        name=name,
        queued=queued_view(queued) if queued is not None else None,
        dead_payload=dead_payload,
        finds_queued=finds_queued,
        broker_name=type(broker).__name__.removesuffix("Broker"),
    )


def _decode(raw: bytes, broker: Broker) -> Message | None:
    """The message, or None; a payload over the broker's size limit isn't parsed (as a
    worker wouldn't), so a page never decodes megabytes per letter."""
    try:
        return Message.decode(raw, max_size=broker.config.max_message_size)
    except MessageDecodeError:
        return None


# ----------------------------------------------------------------------------- dead letters


@dataclasses.dataclass(frozen=True)
class DeadLetterView:
    letter: DeadLetterRecord
    args: str
    kwargs: str
    traceback: str | None
    payload: str | None = None  # previewed when it can't be decoded


def dead_letters(
    broker: Broker, backend: Broker | None, *, redact: bool, limit: int = 100, offset: int = 0
) -> list[DeadLetterView]:
    """Dead letters with their arguments and, where a result was stored, the traceback."""
    views = []
    for letter in broker.list_dead(limit=limit, offset=offset):
        message = _decode(letter.raw, broker)
        record = backend.get_result(letter.id) if backend is not None else None
        views.append(
            DeadLetterView(
                letter=redaction.dead_letter(letter) if redact else letter,
                args=_shown(message.args if message else None, redact),
                kwargs=_shown(message.kwargs if message else None, redact),
                traceback=(redaction.traceback_text(record.traceback) if redact else record.traceback)
                if record and record.traceback
                else None,
                payload=_undecodable(letter.raw, message, redact),
            )
        )
    return views


# ----------------------------------------------------------------------------- schedules


@dataclasses.dataclass(frozen=True)
class ScheduleRow:
    name: str
    task: str
    schedule: str
    next_run: float | None
    error: str | None = None
    last_run: float | None = None  # the newest fire time the broker recorded for it


def schedule_rows(
    beat_schedule: Mapping[str, Any],
    timezone: Any,
    now: float | None = None,
    last_runs: Mapping[str, float] | None = None,
) -> list[ScheduleRow]:
    """Each ``beat_schedule`` entry with its next fire time (computed as the scheduler does)
    and its last one (``last_runs``, from :meth:`Broker.last_fire_times`)."""
    from ..schedules import maybe_schedule, resolve_timezone

    tz: dt.tzinfo = resolve_timezone(timezone)
    moment = time.time() if now is None else now
    last = last_runs or {}
    rows = []
    for name, spec in dict(beat_schedule or {}).items():
        if not isinstance(spec, Mapping) or "schedule" not in spec:
            rows.append(ScheduleRow(str(name), "?", "?", None, "needs 'task' and 'schedule' keys"))
            continue
        task, ran = str(spec.get("task", "?")), last.get(str(name))
        try:
            sched = maybe_schedule(spec["schedule"])
            next_run = sched.next_fire_after(moment, tz)
            rows.append(ScheduleRow(str(name), task, repr(sched), next_run, None, ran))
        except Exception as exc:  # noqa: BLE001 - one bad entry is shown, not a broken page
            rows.append(ScheduleRow(str(name), task, repr(spec["schedule"]), None, str(exc), ran))
    return sorted(rows, key=lambda r: (r.next_run is None, r.next_run or 0.0, r.name))
