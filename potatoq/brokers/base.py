"""The broker contract: the only thing the worker and the app know about a broker.

A broker stores messages and moves them through this life::

    enqueue ──► scheduled (eta in the future) ──(due)──► ready ──claim──► running
                                                          ▲                 │
                       Requeue / recover (dead holder) ───┘                 │ settle
                                                                            ▼
            Complete (result + follow-ups)   RetryLater (same id, new eta)   DeadLetter

Every operation is one atomic step in the broker (one SQL transaction, one Lua call, one
confirmed publish + ack). ``settle`` writes the outcome's result, chord join and follow-up
messages in the same step that removes the task, and it is *fenced*: a delivery whose claim
was lost (its worker was declared dead and the task was delivered again) is refused, so a
late worker can never overwrite the newer delivery's outcome.

What crosses the boundary are small frozen dataclasses (defined in :mod:`.records`,
re-exported here): :class:`Delivery`, the outcome types, :class:`ResultRecord`,
:class:`ChordJoin`, :class:`WorkerInfo`, :class:`QueueStats`, :class:`DeadLetterRecord`.
All of them are JSON-friendly so the worker supervisor can receive a child's delivery over
a pipe and settle it if the child dies.

Rules every implementation follows:

* methods are thread-safe (a worker child may run several threads);
* fork-safe: a connection opened before ``fork()`` is never used, closed or garbage
  collected in the child (see :class:`ProcessLocal`);
* a payload that can't be decoded is still delivered (``Delivery.message is None`` and
  ``Delivery.error`` says why) and its delivery counts, so the worker can dead-letter it
  and one bad row can never block a queue;
* names are validated (:func:`validate_queue_name`) before they reach SQL, Lua or AMQP.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from ..exceptions import InvalidName, OperationalError
from ..message import Message
from .history import HistoryBucket, HistoryPage, HistoryQuery, HistoryRecord, HistorySettings, LinkedTask
from .limits import LimitUsage, RateUsage
from .records import (
    Capabilities,
    ChordJoin,
    Complete,
    DeadLetter,
    DeadLetterRecord,
    Delivery,
    Outcome,
    QueuedTask,
    QueueStats,
    RecoverReport,
    Requeue,
    ResultRecord,
    RetryLater,
    RunningTask,
    WorkerInfo,
    WorkerRef,
    decode_delivery,
    decode_queued,
)

__all__ = [
    "Broker",
    "BrokerConfig",
    "Capabilities",
    "ChordJoin",
    "Complete",
    "DeadLetter",
    "DeadLetterRecord",
    "Delivery",
    "HistoryBucket",
    "HistoryPage",
    "HistoryQuery",
    "HistoryRecord",
    "HistorySettings",
    "LimitUsage",
    "LinkedTask",
    "Outcome",
    "ProcessLocal",
    "QueueStats",
    "QueuedTask",
    "RateUsage",
    "RecoverReport",
    "Requeue",
    "ResultRecord",
    "RetryLater",
    "RunningTask",
    "WorkerInfo",
    "WorkerRef",
    "after_commit_fault",
    "claim_committed",
    "decode_delivery",
    "decode_queued",
    "validate_queue_name",
]

QUEUE_NAME_MAX = 200
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$")


def validate_queue_name(name: str, *, allow_dots: bool = True) -> str:
    """Return ``name`` if it is a safe queue name, else raise :class:`InvalidName` naming it.

    Letters, digits, ``_ - : .`` (no dots on RabbitMQ, whose delay routing keys use them),
    at most 200 characters. Every broker calls this before a name reaches SQL, Lua or AMQP.
    """
    if not isinstance(name, str) or not name:
        raise InvalidName(f"queue name must be a non-empty string, got {name!r:.60}")
    if len(name) > QUEUE_NAME_MAX:
        raise InvalidName(f"queue name is {len(name)} characters long; the limit is {QUEUE_NAME_MAX}")
    if not _QUEUE_NAME.match(name) or (not allow_dots and "." in name):
        allowed = "letters, digits, '_', '-', ':'" + (", '.'" if allow_dots else " (no '.')")
        raise InvalidName(f"invalid queue name {name!r:.80}: use {allowed}")
    return name


#: Fault injection for the fault suite, off (``None``) in production. A broker calls
#: :func:`claim_committed` right after a statement that claimed a task committed, before
#: the claim reaches its caller; a hook that raises there makes the broker behave as if the
#: reply to that commit were lost (``tests/faults/proj.py`` sets it in its workers).
after_commit_fault: Callable[[str, Delivery], None] | None = None


def claim_committed(operation: str, delivery: Delivery | None) -> None:
    """Run :data:`after_commit_fault`, if set, for a claim that just committed."""
    hook = after_commit_fault
    if hook is not None and delivery is not None:
        hook(operation, delivery)


@dataclasses.dataclass(frozen=True)
class BrokerConfig:
    """Settings a broker needs, taken from the app's config by the broker factory."""

    url: str
    transport_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    result_expires: float = 86400.0
    max_deliveries: int = 5
    dead_letter_max: int = 10000
    dead_letter_ttl: float = 30 * 86400.0
    dead_after: float = 60.0  # worker_dead_after: heartbeat silence (and lease length) before recovery
    connection_timeout: float = 4.0
    task_time_limit: float = 1800.0
    result_backend: Broker | None = None  # for brokers that keep results elsewhere (RabbitMQ)
    # task_max_message_size: a larger payload found in storage is delivered undecoded (its
    # size is the error) and dead-lettered, without being parsed. None: no limit.
    max_message_size: int | None = None
    history: HistorySettings = dataclasses.field(default_factory=HistorySettings)
    # worker_prefetch_multiplier, honoured by brokers that push deliveries (RabbitMQ): a
    # process holds up to this many unacked deliveries per task it can run at once.
    prefetch_multiplier: int = 1


# ----------------------------------------------------------------------------- fork safety

T = TypeVar("T")

# Objects opened in a parent process, kept referenced forever in a forked child so that
# garbage collection never closes them there (closing an inherited SQLite connection
# releases the parent's POSIX locks; an inherited socket would be shared with the parent).
_INHERITED: list[object] = []


class ProcessLocal(Generic[T]):
    """A value per process *and* thread, made by ``factory`` on first use.

    After ``fork()`` the child never touches the parent's value: it is parked in a list that
    is never collected, and the child makes its own. ``close_all`` closes only values this
    process made.
    """

    def __init__(self, factory: Callable[[], T], close: Callable[[T], None] | None = None) -> None:
        self._factory = factory
        self._close = close
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._values: dict[int, T] = {}

    def get(self) -> T:
        self._check_fork()
        key = threading.get_ident()
        value = self._values.get(key)
        if value is None:
            value = self._factory()
            with self._lock:
                self._values[key] = value
        return value

    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    _INHERITED.extend(self._values.values())
                    self._values = {}
                    self._pid = os.getpid()

    def discard(self) -> None:
        """Forget (and close) this thread's value, e.g. after a connection error."""
        self._check_fork()
        with self._lock:
            value = self._values.pop(threading.get_ident(), None)
        if value is not None and self._close is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close
                self._close(value)

    def close_all(self) -> None:
        self._check_fork()
        with self._lock:
            values, self._values = list(self._values.values()), {}
        if self._close is not None:
            for value in values:
                with contextlib.suppress(Exception):
                    self._close(value)


#: Seconds a close from another thread waits for a statement running on a connection.
CLOSE_WAIT = 5.0


def close_when_idle(lock: Any, close: Callable[[], None], what: str) -> None:
    """Run ``close`` holding ``lock``, the lock a connection's statements hold.

    ``close_all`` closes every thread's connection from the closing thread, and closing a
    database connection under another thread's running statement crashes the interpreter
    (sqlite3) or frees libpq's connection under it (psycopg). Waits ``CLOSE_WAIT`` at
    most; a statement still running then keeps its connection, which closes when its
    owner drops it."""
    if not lock.acquire(timeout=CLOSE_WAIT):
        logging.getLogger("potatoq.brokers").warning(
            "a thread still runs a statement on its %s connection: not closed now", what
        )
        return
    try:
        close()
    finally:
        lock.release()


# ----------------------------------------------------------------------------- the contract


class Broker(abc.ABC):
    """The contract. Subclasses implement every abstract method as one atomic broker step."""

    capabilities: ClassVar[Capabilities] = Capabilities()
    #: Exceptions meaning "the broker can't be reached right now": callers retry these with
    #: backoff (settles) or until ``broker_connection_timeout`` (enqueues). Brokers extend
    #: it with their client library's connection errors.
    connection_errors: ClassVar[tuple[type[BaseException], ...]] = (
        ConnectionError,
        OSError,
        OperationalError,
    )
    #: URL schemes this broker serves, e.g. ``("sqlite",)``.
    schemes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        #: Set by a worker: the outcome of a delivery that :meth:`recover` finds at its
        #: delivery limit, given the ``WorkerLostError`` (the executor's failure outcome: dead
        #: letter, FAILURE result, errbacks, chord join). A broker that settles such tasks
        #: itself uses it instead of a bare dead letter; without it, or on brokers that
        #: don't, recovery writes the dead letter and FAILURE result only.
        self.lost_outcome: Callable[[Delivery, BaseException], Outcome] | None = None

    # -- messages ---------------------------------------------------------------------------

    @abc.abstractmethod
    def enqueue(self, messages: Sequence[Message], *, connection: Any = None) -> None:
        """Store one or many messages, due now or at ``message.eta``.

        With ``connection`` (a DB-API connection of the same database, brokers with
        ``capabilities.transactional_enqueue`` only) the rows are written inside the
        caller's open transaction: rolled back means never run, committed means always run.
        Enqueueing an id that is already waiting or running is a no-op. With
        ``capabilities.unique_tasks``, a message whose unique key (``uq`` header, see
        :mod:`potatoq.brokers.unique`) is held by another task is not stored either, and
        :meth:`Message.mark_duplicate` names that task on it, in the same atomic step.
        """

    @abc.abstractmethod
    def claim(self, queues: Sequence[str], worker: WorkerRef) -> Delivery | None:
        """Atomically take the best ready task from ``queues`` (tried in the order given).

        Within a queue: highest priority first, FIFO within a priority. Due scheduled
        tasks become ready without any worker holding them in memory.

        FIFO is the order in which tasks *became ready*, not the order they were sent: a
        task with an eta, and a retry (a new attempt, due now or later), join the back of
        their priority when they become ready, behind tasks that were ready before them.
        That is the only order RabbitMQ can keep (a delayed message is published when it
        falls due), and it is fair: a task scheduled an hour ago can't jump ahead of work
        that has waited, nor a failing task retried at once hold the head of its queue. Records ``worker``
        as the holder, increments the delivery count and sets a fresh fencing token.
        """

    @abc.abstractmethod
    def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        """Apply ``outcome`` to a claimed task in one atomic step.

        Returns False, changing nothing, when the delivery is stale (its token no longer
        matches: the task was recovered and delivered again).
        """

    def settle_and_claim(
        self, delivery: Delivery, outcome: Outcome, queues: Sequence[str], worker: WorkerRef
    ) -> tuple[bool, Delivery | None]:
        """Settle, then claim the caller's next task. Brokers that can do both in one round
        trip override this; busy workers then pay one round trip per task instead of two."""
        return self.settle(delivery, outcome), self.claim(queues, worker)

    @abc.abstractmethod
    def wait(self, queues: Sequence[str], timeout: float) -> None:
        """Block until work may be ready in ``queues`` or ``timeout`` seconds pass.

        Uses the broker's native wake-up; spurious returns are allowed, missed wake-ups are
        not (the caller claims after every return). Work already ready when ``wait`` is
        called counts: it returns at once, whether or not this thread claimed just before
        (an app and a worker are often different broker instances).
        """

    def interrupt(self) -> None:  # noqa: B027 - optional hook
        """Wake up a thread blocked in :meth:`wait` (used at shutdown). Optional."""

    def serve_slots(self, slots: int) -> None:  # noqa: B027 - optional hook
        """This process runs up to ``slots`` tasks at once (a worker child's threads), from
        now on. Brokers that push deliveries to a process (RabbitMQ) size what it may hold
        by it; the others ignore it. Optional; call it before the first claim."""

    # -- liveness ---------------------------------------------------------------------------

    @abc.abstractmethod
    def heartbeat(self, info: WorkerInfo) -> None:
        """Record that worker node ``info.node`` is alive, with what it is running."""

    @abc.abstractmethod
    def workers(self) -> list[WorkerInfo]:
        """Worker nodes with their last heartbeat (``last_seen``), newest first."""

    @abc.abstractmethod
    def forget_worker(self, node: str) -> None:
        """Remove a node's heartbeat record (clean shutdown)."""

    @abc.abstractmethod
    def recover(self, dead_after: float, max_deliveries: int) -> RecoverReport:
        """Make tasks held by dead holders ready again.

        A holder is dead when its node's last heartbeat (or, with no heartbeat on record,
        its claim) is older than ``dead_after`` seconds (or its lease expired, on lease
        brokers). A task whose delivery count has reached
        ``max_deliveries`` is dead-lettered as ``WorkerLostError`` instead (with a FAILURE
        result where results are stored). Safe to run from many workers at once.
        """

    def held_by(self, worker: WorkerRef) -> list[Delivery]:
        """The deliveries still claimed by ``worker`` (that exact node and pid), oldest first.

        A supervisor asks this after one of its children died. A child killed between a
        claim's commit and its report to the supervisor holds a task the supervisor never
        heard of, under a node that keeps heartbeating, so :meth:`recover` would never free
        it. The supervisor settles each delivery returned like a reported delivery of a dead
        child (fenced on its token, so a race with recovery is harmless). Read-only.

        A broker that lists exactly (``capabilities.lists_holders``) lets a worker's
        children skip reporting each task to their supervisor: it asks this instead, for
        leases and heartbeats too. Brokers whose claims end with their holder on their own
        (AMQP channels that close) may keep this default, which returns nothing.
        """
        return []

    def orphaned(self, node: str, live_pids: Sequence[int]) -> list[Delivery]:
        """The deliveries claimed under ``node`` by a process not in ``live_pids``, oldest first.

        :meth:`held_by`, asked once when a child died, can miss a claim that commits after
        that: a database server finishes (and commits) the statement of a client killed
        while waiting for its reply, so the row names a dead pid from then on, under a node
        that keeps heartbeating. The supervisor asks this every recovery round with its own
        pid only, so one query lists its children's claims too: those of dead pids it
        settles like a dead child's delivery (fenced on the token), those of live children
        it compares with what their threads run (a claim whose reply was lost). Read-only.
        Lease brokers may keep this default, which returns nothing: there the supervisor
        asks :meth:`held_by` once more a round after each reap, and the claim's lease is the
        backstop.
        """
        return []

    def extend(self, deliveries: Sequence[Delivery], ttl: float) -> None:  # noqa: B027
        """Push the lease deadline of running deliveries ``ttl`` seconds ahead (lease brokers)."""

    # -- concurrency limits (capabilities.concurrency_limits; see brokers/limits.py) ----------

    def set_limit(self, key: str, limit: int | None) -> None:
        """Override the concurrency limit of ``key`` at run time (``None`` removes the
        override, so the ``max`` carried by the tasks applies again)."""
        raise OperationalError(f"{type(self).__name__} doesn't enforce concurrency limits")

    def limits(self) -> list[LimitUsage]:
        """Every concurrency limit in use or overridden, by key: running and waiting counts."""
        return []

    # -- global rate limits (capabilities.rate_limits; see brokers/limits.py) -----------------

    def set_rate(self, key: str, rate: str | float | None, burst: int | None = None) -> None:
        """Override the rate limit of ``key`` at run time (``"100/s"``, ``"20/m"``, ``"5/h"``
        or tasks per second, with ``burst``); ``None`` removes the override. The key starts
        again with a full burst, and tasks already waiting on it are spread at the new rate."""
        raise OperationalError(f"{type(self).__name__} doesn't enforce global rate limits")

    def rates(self) -> list[RateUsage]:
        """Every rate limit with waiting tasks, tokens in use or an override, by key."""
        return []

    # -- chords and periodic tasks ------------------------------------------------------------

    @abc.abstractmethod
    def chord_join(self, join: ChordJoin, *, enqueue_callback: bool = True) -> bool:
        """Record one header part; True for the one call that completed the chord (and, with
        ``enqueue_callback``, enqueued its callback in the same step). Idempotent per
        ``join.index``. ``enqueue_callback=False`` is for a broker that keeps chords in a
        separate result backend and sends the callback itself (RabbitMQ)."""

    @abc.abstractmethod
    def chord_parts(self, group_id: str) -> list[bytes]:
        """The parts' values in index order (empty once forgotten or expired)."""

    @abc.abstractmethod
    def claim_fire_time(self, name: str, fire_time: float, message: Message | None) -> bool:
        """Enqueue ``message`` for periodic entry ``name`` at ``fire_time`` unless some caller
        already did: True exactly once per ``(name, fire_time)`` among any number of callers.
        With ``message=None`` only the fire time is recorded (the caller sends it)."""

    @abc.abstractmethod
    def last_fire_times(self, names: Sequence[str]) -> dict[str, float]:
        """The latest fire time recorded by :meth:`claim_fire_time` for each entry in ``names``.

        Entries with no fire time on record (never fired, or remembered no longer) are left
        out. Read-only: the dashboard and ``potatoq schedule`` show it as the last run.
        """

    # -- pausing queues -----------------------------------------------------------------------

    @abc.abstractmethod
    def pause_queue(self, queue: str) -> bool:
        """Pause ``queue`` for the whole fleet; True if it wasn't paused already.

        The flag is stored in the broker (it survives worker and broker restarts). Workers
        re-read :meth:`paused_queues` about twice a second and stop claiming from a paused
        queue; tasks already running finish, and producers can still enqueue to it.
        """

    @abc.abstractmethod
    def resume_queue(self, queue: str) -> bool:
        """Undo :meth:`pause_queue`; True if ``queue`` was paused."""

    @abc.abstractmethod
    def paused_queues(self) -> dict[str, float]:
        """Every paused queue with the epoch time it was paused at. Read-only."""

    def consume_only(self, queues: Sequence[str]) -> None:  # noqa: B027 - optional hook
        """The worker's claimable queues changed to ``queues`` (a queue was paused or resumed;
        maybe none is left). Brokers that push deliveries (RabbitMQ) cancel the consumers of
        the other queues here; brokers that are asked at every claim keep this no-op."""

    # -- results ------------------------------------------------------------------------------

    @abc.abstractmethod
    def store_result(self, record: ResultRecord) -> None:
        """Write (overwrite) a task's result; it expires after ``config.result_expires``."""

    @abc.abstractmethod
    def get_result(self, task_id: str) -> ResultRecord | None:
        """The stored result, or None (unknown, expired or forgotten)."""

    def store_result_fenced(self, record: ResultRecord, fence: int, *, keep_ready: bool = False) -> bool:
        """Write ``record`` over a stored, unexpired result only if that result's fence is
        not higher (a late write of an older claim is refused, see ``fenced_payload`` in :mod:`.records`) or,
        with ``keep_ready``, only if its state is not ready (revoke: never over a SUCCESS);
        True if written. Brokers that serve as another broker's result backend (SQLite,
        PostgreSQL, Redis) decide and write in one atomic step. This default, for
        in-process brokers, checks ``keep_ready`` only and is not atomic."""
        from potatoq.states import READY_STATES

        current = self.get_result(record.task_id)
        if keep_ready and current is not None and current.state in READY_STATES:
            return False
        self.store_result(record)
        return True

    def wait_for_result(self, task_id: str, timeout: float | None) -> ResultRecord | None:
        """Block until the task's result is in a ready state (or ``timeout``); return the
        latest record seen. The default polls with a backoff; brokers with a native
        notification override it."""
        from ..states import READY_STATES

        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.002
        while True:
            record = self.get_result(task_id)
            if record is not None and record.state in READY_STATES:
                return record
            if deadline is not None and time.monotonic() >= deadline:
                return record
            sleep = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
            time.sleep(sleep)
            delay = min(delay * 2, 0.1)

    @abc.abstractmethod
    def forget_result(self, task_id: str) -> None:
        """Delete a stored result."""

    # -- revocation, dead letters, stats --------------------------------------------------

    @abc.abstractmethod
    def revoke(self, task_id: str) -> bool:
        """Remove a waiting (ready or scheduled) task; True if one was removed. Brokers that
        can't delete (``revoke_deletes=False``) record the id and skip it at claim."""

    def is_revoked(self, task_id: str) -> bool:
        """True when a revoked id must be skipped at delivery (brokers that can't delete)."""
        return False

    @abc.abstractmethod
    def queued_task(self, task_id: str) -> QueuedTask | None:
        """The task ``task_id`` as the broker holds it (scheduled, ready or running), or None.

        Read-only. Brokers that can't look a queued message up by id
        (``capabilities.finds_queued`` False) always return None.
        """

    @abc.abstractmethod
    def list_dead(self, limit: int = 100, offset: int = 0) -> list[DeadLetterRecord]:
        """Dead letters, newest first. Only reads: never removes or reorders them.

        Letters older than ``config.dead_letter_ttl`` are never listed, even when nothing
        has died since (a broker may drop them lazily, but must not show them)."""

    @abc.abstractmethod
    def retry_dead(self, ids: Sequence[str] | None = None) -> int:
        """Put dead letters (all when ``ids`` is None) back on their queue, payload unchanged.

        Returns how many were put back. A dead letter whose id is already waiting or running
        again is left where it is and not counted (enqueueing it would be a no-op), so that
        retrying never drops a payload; retry it once that task is gone."""

    @abc.abstractmethod
    def purge_dead(self) -> int:
        """Delete every dead letter; return how many."""

    @abc.abstractmethod
    def queue_stats(self) -> list[QueueStats]:
        """Per-queue counts of waiting, delayed and running tasks."""

    @abc.abstractmethod
    def purge(self, queues: Sequence[str]) -> int:
        """Delete waiting (ready and scheduled) tasks of ``queues``; running ones stay."""

    # -- task history (see potatoq.brokers.history) -------------------------------------------

    @abc.abstractmethod
    def history(self, query: HistoryQuery) -> HistoryPage:
        """Finished deliveries matching ``query``, newest first, one keyset page at a time.

        Read-only. With ``config.history.enabled`` False nothing is recorded (older records
        stay readable until retention drops them)."""

    def history_buckets(
        self, start: float, step: float, buckets: int, name: str | None = None
    ) -> dict[int, HistoryBucket] | None:
        """Aggregates of the records that finished in each of ``buckets`` steps of ``step``
        seconds from ``start`` (of task ``name``), by bucket number (empty ones left out),
        computed where the records are; None: this broker can't, read the records."""
        return None

    def history_links(self, *, parent_id: str | None = None, group_id: str | None = None) -> list[LinkedTask]:
        """The tasks whose history records name ``parent_id`` as their parent (what ran
        after it: chain steps, callbacks) or ``group_id`` as their group (its members), each
        once with its newest record's state, in the order they finished (``LINKS_MAX`` at
        most). Read through an index (the task page's chain and group links); give one of
        the two. [] for a broker that keeps no history."""
        return []

    @abc.abstractmethod
    def append_history(self, records: Sequence[HistoryRecord]) -> None:
        """Store ``records`` (settles write theirs themselves; this is for records made
        elsewhere, e.g. by a broker whose history lives in its result store)."""

    def hold_history(self, records: Sequence[HistoryRecord]) -> None:
        """Store ``records``, possibly later, with other writes (brokers that hold a
        thread's records: see :mod:`potatoq.brokers.history_buffer`); ``flush_history``
        writes what is held. For a broker whose history lives in its result store."""
        self.append_history(records)

    def flush_history(self, force: bool = True) -> bool:
        """Write the records this thread holds (see :meth:`hold_history`): all of them, or
        with ``force=False`` only once due. True if some are still held."""
        return False

    # -- lifecycle ----------------------------------------------------------------------------

    def migrate(self) -> None:  # noqa: B027
        """Create tables, queues or scripts now (otherwise done on first use)."""

    def ping(self) -> None:  # noqa: B027
        """Raise ``OperationalError`` if the broker can't be reached."""

    def close(self) -> None:  # noqa: B027
        """Release this process's connections."""

    def __repr__(self) -> str:
        from ..utils import mask_url

        return f"<{type(self).__name__} {mask_url(self.config.url)}>"
