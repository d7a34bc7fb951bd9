"""The value types that cross the broker boundary: small frozen dataclasses, all of them
JSON-friendly so the worker supervisor can receive a child's delivery over a pipe and settle
it if the child dies. :mod:`potatoq.brokers.base` re-exports every one of them; import them
from there."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from .. import serialization
from ..exceptions import MessageDecodeError, SerializationError
from ..message import Message
from ..utils.frozen import positional_builder


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerRef:
    """Who holds a claim: a worker node (one per supervisor run) and the child's pid."""

    node: str
    pid: int


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """A claimed task. ``token`` fences it: only this delivery can settle it."""

    id: str
    queue: str
    raw: bytes
    token: str
    deliveries: int  # times delivered, this one included (crashes count, shutdowns don't)
    worker: WorkerRef
    message: Message | None = None  # None when ``raw`` couldn't be decoded
    error: str | None = None  # why decoding failed
    handle: str | int | None = None  # broker-private (e.g. an AMQP delivery tag)
    claimed_at: float = dataclasses.field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict, for sending a child's delivery to its supervisor."""
        return {
            "id": self.id,
            "queue": self.queue,
            "raw": self.raw,
            "token": self.token,
            "deliveries": self.deliveries,
            "worker": [self.worker.node, self.worker.pid],
            "handle": self.handle,
            "claimed_at": self.claimed_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Delivery:
        node, pid = data["worker"]
        return decode_delivery(
            id=data["id"],
            queue=data["queue"],
            raw=data["raw"],
            token=data["token"],
            deliveries=data["deliveries"],
            worker=WorkerRef(node, pid),
            handle=data.get("handle"),
            claimed_at=data.get("claimed_at") or time.time(),
        )


def _decode_raw(raw: bytes | str, max_size: int | None = None) -> tuple[bytes, Message | None, str | None]:
    """``raw`` as bytes, and its decoded message or why it couldn't be decoded (a payload
    over ``max_size`` bytes isn't parsed)."""
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    try:
        return data, Message.decode(data, max_size=max_size), None
    except MessageDecodeError as exc:
        return data, None, exc.reason


def decode_delivery(
    *,
    id: str,  # noqa: A002 - mirrors Delivery.id
    queue: str,
    raw: bytes | str,
    token: str,
    deliveries: int,
    worker: WorkerRef,
    handle: str | int | None = None,
    claimed_at: float | None = None,
    max_size: int | None = None,
) -> Delivery:
    """Build a :class:`Delivery`, decoding ``raw``; a decode failure is recorded, not raised.
    A payload over ``max_size`` bytes (``BrokerConfig.max_message_size``) isn't parsed: its
    size is the error, and the worker dead-letters it."""
    data, message, error = _decode_raw(raw, max_size)
    # Positionally, without the dataclass __init__: a worker builds one per task.
    return _build_delivery(
        id,
        queue,
        data,
        str(token),
        int(deliveries),
        worker,
        message,
        error,
        handle,
        time.time() if claimed_at is None else claimed_at,
    )


_build_delivery = positional_builder(Delivery)


@dataclasses.dataclass(frozen=True, slots=True)
class QueuedTask:
    """A task the broker still holds, as :meth:`Broker.queued_task` reads it back.

    ``state`` is ``"scheduled"`` (its eta is ahead, or it is due but not yet made ready),
    ``"ready"`` or ``"running"``. ``due`` is when it is (or became) due, epoch seconds.
    ``deliveries`` counts the deliveries of this attempt so far (crashes count).
    """

    id: str
    queue: str
    state: str
    priority: int
    due: float | None
    deliveries: int
    raw: bytes
    message: Message | None = None  # None when ``raw`` couldn't be decoded
    error: str | None = None  # why decoding failed


def decode_queued(
    *,
    id: str,  # noqa: A002 - mirrors QueuedTask.id
    queue: str,
    state: str,
    priority: int,
    due: float | None,
    deliveries: int,
    raw: bytes | str,
    max_size: int | None = None,
) -> QueuedTask:
    """Build a :class:`QueuedTask`, decoding ``raw``; a decode failure is recorded, not raised
    (the page that shows it must still work for a row a worker will dead-letter)."""
    data, message, error = _decode_raw(raw, max_size)
    return QueuedTask(
        id=id,
        queue=queue,
        state=state,
        priority=int(priority),
        due=None if due is None else float(due),
        deliveries=int(deliveries),
        raw=data,
        message=message,
        error=error,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ResultRecord:
    """A task's state and outcome as stored by a result backend."""

    task_id: str
    state: str
    result: Any = None  # the return value, an encoded exception, or custom-state meta
    traceback: str | None = None
    name: str | None = None
    retries: int = 0
    date_done: float | None = None
    parent_id: str | None = None
    group_id: str | None = None
    children: tuple[str, ...] = ()
    args: tuple[Any, ...] | None = None
    kwargs: Mapping[str, Any] | None = None

    def encode(self) -> bytes:
        # The fields as they are, not dataclasses.asdict: its deep copy of the result,
        # arguments and keyword arguments was 9 % of a SQLite worker child's CPU on no-op
        # tasks storing their results. asdict also turns a dataclass inside the result into
        # a dict, which JSON can't encode as it is: such a result takes the old way.
        body = {name: getattr(self, name) for name in _RESULT_FIELDS}
        body["children"] = list(self.children)
        where = f"result of task {self.task_id}"
        try:
            return serialization.dumps(body, where=where).encode()
        except SerializationError:
            body = dataclasses.asdict(self)
            body["children"] = list(self.children)
            return serialization.dumps(body, where=where).encode()

    @classmethod
    def decode(cls, data: bytes | str) -> ResultRecord:
        body = serialization.loads(data)
        body["children"] = tuple(body.get("children") or ())
        if body.get("args") is not None:
            body["args"] = tuple(body["args"])
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in body.items() if k in fields})


_RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(ResultRecord))


@dataclasses.dataclass(frozen=True, slots=True)
class ChordJoin:
    """One header task of a chord reporting in.

    ``value`` is the part's encoded outcome. The join is idempotent per ``index`` (a
    redelivered header task joining twice counts once). The join that brings the number of
    distinct parts to ``size`` enqueues ``callback``, exactly once, in the same atomic step.
    The callback then reads the parts, in index order, with :meth:`Broker.chord_parts`.
    """

    group_id: str
    index: int
    size: int
    value: bytes
    callback: Message


@dataclasses.dataclass(frozen=True, slots=True)
class Complete:
    """The task ran (successfully or not) and is done: remove it."""

    result: ResultRecord | None = None
    followups: tuple[Message, ...] = ()
    chord: ChordJoin | None = None
    #: (exception type, message) of a failure that completes (``throws``): task history
    #: records it even when no result is stored.
    error: tuple[str, str] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RetryLater:
    """Run the task again: ``message`` (same id, retries + 1) becomes due at ``message.eta``.

    The delivery count starts again from zero: it counts crashes of one attempt.
    """

    message: Message
    result: ResultRecord | None = None
    #: (exception type, message) that asked for the retry, for task history.
    error: tuple[str, str] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Requeue:
    """Put the task back, ready now.

    ``crashed=False`` (a graceful shutdown) doesn't count this delivery towards
    ``task_max_deliveries``; ``crashed=True`` (the process died) does.
    """

    crashed: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetter:
    """Move the task, payload unchanged, to the dead letters with ``reason``."""

    reason: str
    result: ResultRecord | None = None
    followups: tuple[Message, ...] = ()
    chord: ChordJoin | None = None


Outcome = Complete | RetryLater | Requeue | DeadLetter


@dataclasses.dataclass(frozen=True, slots=True)
class RunningTask:
    pid: int
    task_id: str
    task: str
    started_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What a worker node reports with each heartbeat."""

    node: str
    hostname: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: float
    running: tuple[RunningTask, ...] = ()
    processed: int = 0
    registered: tuple[str, ...] = ()
    last_seen: float = 0.0  # filled in by the broker when read back

    def encode(self) -> bytes:
        return serialization.dumps(dataclasses.asdict(self), where="worker info").encode()

    @classmethod
    def decode(cls, data: bytes | str, last_seen: float | None = None) -> WorkerInfo:
        body = serialization.loads(data)
        body["queues"] = tuple(body.get("queues") or ())
        body["registered"] = tuple(body.get("registered") or ())
        body["running"] = tuple(RunningTask(**r) for r in body.get("running") or ())
        if last_seen is not None:
            body["last_seen"] = last_seen
        return cls(**body)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    waiting: int
    delayed: int
    running: int
    oldest_waiting_age: float | None  # seconds since the oldest ready task became due
    # The fields ("waiting", "delayed") that are estimates, not exact counts: a broker counts
    # a queue's tasks exactly up to a cap and estimates above it (potatoq.brokers.estimates).
    estimated: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    id: str
    queue: str
    task: str | None
    reason: str
    raw: bytes  # the payload exactly as it was delivered; retry puts it back unchanged
    died_at: float
    deliveries: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class RecoverReport:
    requeued: int = 0
    dead: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    """What a broker can do, as data: shared tests and the worker branch on these, never on names."""

    transactional_enqueue: bool = False  # enqueue(..., connection=) through the caller's DB-API connection
    stores_results: bool = True  # results can live in the broker itself
    results_by_default: bool = (
        True  # result_backend=None means "the broker" (databases) or "none" (Redis, AMQP)
    )
    supervisor_settles: bool = True  # the supervisor may settle a dead child's delivery
    lists_holders: bool = True  # held_by() lists exactly what one worker process holds
    exact_priorities: bool = True  # any int priority orders exactly (AMQP: bands)
    leases: bool = False  # claims expire unless extend() is called
    # interrupt() always wakes wait(), even one about to start: a worker may block in wait()
    # for a long time (idle_wait_interruptible) instead of re-checking every idle_wait.
    interruptible_wait: bool = False
    revoke_deletes: bool = True  # revoke() removes a waiting task from storage
    crash_safe_storage: bool = True  # survives the broker process being killed (memory:// doesn't)
    multiprocess: bool = True  # several processes share one broker (memory:// is per process)
    # The four below are False only on RabbitMQ, whose queues can't be searched, updated or
    # written together with a result store (added with the RabbitMQ broker):
    unique_ids: bool = True  # enqueue of an id already waiting or running is a no-op
    atomic_settle: bool = True  # result, follow-ups and removal in one step (AMQP: publish, then ack)
    recovers_dead_holders: bool = True  # recover() finds dead holders (AMQP: the server requeues them)
    full_stats: bool = True  # queue_stats/purge see scheduled and running tasks (AMQP: ready ones only)
    # queued_task() finds a waiting task by id. AMQP queues can't be searched: a message is
    # only seen when it is delivered, so RabbitMQ answers None until the task runs.
    finds_queued: bool = True
    # The claim enforces the cluster-wide concurrency limit a message carries (brokers/limits.py).
    concurrency_limits: bool = False
    # The claim enforces the cluster-wide rate limit a message carries (brokers/limits.py).
    rate_limits: bool = False
    # enqueue keeps one task per unique key, atomically (brokers/unique.py).
    unique_tasks: bool = False


# -- fenced result writes ---------------------------------------------------------------------
#
# Fenced result writes: a result carries the fence of the claim that produced it, and a
# write with a lower fence than the stored result's is refused (compare-and-set).
#
# A broker that keeps results in another store (RabbitMQ) can't make its "is this delivery
# still mine?" check and the result write one step, so a worker paused in between could
# overwrite the result of the delivery that replaced it. The fence closes that gap: a later
# claim of the same task has a higher fence (its claim time, in ms), so the store itself
# refuses the late write. The fence travels inside the encoded record, as the key
# ``fence`` (``ResultRecord.decode`` ignores it), so no result table changes shape.
#
# The same conditional write with ``keep_ready`` (fence ignored) is how ``revoke`` records
# REVOKED without ever replacing a result that landed meanwhile.

#: The key of the encoded record that holds its fence (absent: 0, an unfenced write).
FENCE_KEY = "fence"


def fenced_payload(record: ResultRecord, fence: int) -> bytes:
    """``record.encode()`` with ``fence`` added."""
    body = serialization.loads(record.encode())
    body[FENCE_KEY] = int(fence)
    return serialization.dumps(body, where=f"result of task {record.task_id}").encode()


def stored_fence(payload: bytes | str) -> int:
    """The fence of an encoded record (0: written without one)."""
    try:
        return int(serialization.loads(payload).get(FENCE_KEY) or 0)
    except (ValueError, TypeError, AttributeError):
        return 0
