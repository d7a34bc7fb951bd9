"""What the RabbitMQ broker keeps in its result backend (RabbitMQ queues can't store it):
results, revocations, worker heartbeats, chord joins and periodic fire times, mixed into
:class:`~.broker.RabbitMQBroker`."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from potatoq.brokers.base import (
    Broker,
    ChordJoin,
    RecoverReport,
    ResultRecord,
    WorkerInfo,
    validate_queue_name,
)
from potatoq.brokers.rabbitmq.options import RabbitMQOptions
from potatoq.exceptions import ImproperlyConfigured
from potatoq.message import Message
from potatoq.states import REVOKED

__all__ = ["FIRED_KEEP", "NOT_REVOKED_FRESH", "RabbitMQBacked"]

#: Fire times (and chord parts mid-join) remembered in this process.
FIRED_KEEP = 1000
#: How long (s) a claim's "not revoked" read answers the worker's check before the task
#: runs. A revoke that lands in between is missed either way (the task is about to start);
#: a task held back longer (a rate limit's wait) is read again.
NOT_REVOKED_FRESH = 1.0
#: Prefix of the periodic entry names under which a fire time is recorded as won (being
#: sent); the entry's own name records it as sent.
_SENDING = "potatoq.sending:"


class RabbitMQBacked(Broker):
    """The result-backend half of :class:`~.broker.RabbitMQBroker`."""

    if TYPE_CHECKING:
        backend: Broker | None
        options: RabbitMQOptions
        _lock: threading.Lock
        _fired: OrderedDict[tuple[str, float], None]
        _not_revoked: OrderedDict[str, float]

        def _publish_once(self, message: Message) -> None: ...
        def _checked(self, message: Message) -> Message: ...
        def _leads_scheduler(self) -> bool: ...

    def _backend(self, what: str) -> Broker:
        if self.backend is None:
            raise ImproperlyConfigured(
                f"{what} on RabbitMQ needs a result backend: set result_backend to a Redis, "
                "PostgreSQL or SQLite URL (RabbitMQ queues can't store results)"
            )
        return self.backend

    # ------------------------------------------------------------------ liveness

    def heartbeat(self, info: WorkerInfo) -> None:
        if self.backend is not None:
            self.backend.heartbeat(info)

    def workers(self) -> list[WorkerInfo]:
        return self.backend.workers() if self.backend is not None else []

    def forget_worker(self, node: str) -> None:
        if self.backend is not None:
            self.backend.forget_worker(node)

    def recover(self, dead_after: float, max_deliveries: int) -> RecoverReport:
        """RabbitMQ returns a dead holder's deliveries itself, as soon as its connection
        closes (at the latest two AMQP heartbeat timeouts after it went silent), and
        dead-letters them at the delivery limit: nothing to requeue here. What is left is
        the heartbeat record of a dead node (a new node id each run): once it has been
        silent for ``dead_after`` and that long, its tasks are back in their queues, so the
        record is deleted."""
        if self.backend is not None:
            heartbeat = self.options.heartbeat if self.options.heartbeat is not None else 60
            cutoff = time.time() - max(dead_after, 2.0 * heartbeat)
            for info in self.backend.workers():
                if info.last_seen < cutoff:
                    self.backend.forget_worker(info.node)
            # a Redis result store builds the charts' rollups from its history stream here
            roll_up = getattr(self.backend, "roll_up_history", None)
            if roll_up is not None:
                roll_up()
        return RecoverReport()

    # ------------------------------------------------------------------ chords, periodic

    def chord_join(self, join: ChordJoin, *, enqueue_callback: bool = True) -> bool:
        backend = self._backend("a chord")
        if enqueue_callback:
            validate_queue_name(join.callback.queue, allow_dots=False)
        done = backend.chord_join(join, enqueue_callback=False)
        if done and enqueue_callback:
            self._publish_once(join.callback)
        return done

    def chord_parts(self, group_id: str) -> list[bytes]:
        return self._backend("a chord").chord_parts(group_id)

    def claim_fire_time(self, name: str, fire_time: float, message: Message | None) -> bool:
        if message is not None:
            self._checked(message)
        if self.backend is not None:
            return self._fire_once(self.backend, name, fire_time, message)
        # No shared store: the scheduler leader remembers what it sent (a failover
        # may then skip or repeat a run; a result backend avoids both).
        with self._lock:
            first = (name, fire_time) not in self._fired
            self._fired[(name, fire_time)] = None
            while len(self._fired) > FIRED_KEEP:
                self._fired.popitem(last=False)
        if first and message is not None:
            self.enqueue([message])
        return first

    def _fire_once(self, backend: Broker, name: str, fire_time: float, message: Message | None) -> bool:
        """Exactly one caller wins a fire time; it publishes the run, then records it as
        sent (the fire time under ``name``, what ``last_fire_times`` shows).

        A publish that failed, or a process that died between winning and publishing,
        leaves the fire time won but not recorded as sent. The scheduler leader (the
        token holder) sends such a fire time again when it is asked for it: the same
        leader on its next tick, or the next leader after a crash. If the run had been
        published just before the crash it then runs twice (at-least-once, never lost).
        """
        if message is None:
            return backend.claim_fire_time(name, fire_time, None)
        if not backend.claim_fire_time(_SENDING + name, fire_time, None):
            sent = backend.last_fire_times([name]).get(name, float("-inf")) >= fire_time
            if sent or not self._leads_scheduler():
                return False  # sent already, or another process (the leader) sends it
        self.enqueue([message])
        backend.claim_fire_time(name, fire_time, None)
        return True

    def last_fire_times(self, names: Sequence[str]) -> dict[str, float]:
        if self.backend is not None:
            return self.backend.last_fire_times(names)
        # Without a shared store only this process's own sends are known (the scheduler
        # leader's, when this process holds the token).
        wanted = set(names)
        with self._lock:
            last: dict[str, float] = {}
            for name, fire_time in self._fired:
                if name in wanted and fire_time > last.get(name, float("-inf")):
                    last[name] = fire_time
        return last

    # ------------------------------------------------------------------ results

    def store_result(self, record: ResultRecord) -> None:
        self._backend("storing a result").store_result(record)

    def store_result_fenced(self, record: ResultRecord, fence: int, *, keep_ready: bool = False) -> bool:
        backend = self._backend("storing a result")
        return backend.store_result_fenced(record, fence, keep_ready=keep_ready)

    def get_result(self, task_id: str) -> ResultRecord | None:
        return self._backend("reading a result").get_result(task_id)

    def wait_for_result(self, task_id: str, timeout: float | None) -> ResultRecord | None:
        return self._backend("waiting for a result").wait_for_result(task_id, timeout)

    def forget_result(self, task_id: str) -> None:
        self._backend("forgetting a result").forget_result(task_id)

    # ------------------------------------------------------------------ revocation

    def _read_not_revoked(self, task_id: str) -> None:
        """A claim of this process read ``task_id``'s record and found it not revoked."""
        with self._lock:
            self._not_revoked[task_id] = time.monotonic()
            self._not_revoked.move_to_end(task_id)
            while len(self._not_revoked) > FIRED_KEEP:
                self._not_revoked.popitem(last=False)

    def revoke(self, task_id: str) -> bool:
        """Record ``task_id`` as REVOKED in the result backend; claims skip it.

        Returns False (recording nothing) when the task already finished.
        """
        backend = self._backend("revoking a task")
        # One conditional write: a result that lands between a read and a write would
        # otherwise be replaced by REVOKED.
        record = ResultRecord(task_id=task_id, state=REVOKED, date_done=time.time())
        return backend.store_result_fenced(record, 0, keep_ready=True)

    def is_revoked(self, task_id: str) -> bool:
        """Whether ``task_id`` is revoked. The worker asks just before running a task that
        this process's claim checked already (see ``RabbitMQBroker._skipped``): within
        :data:`NOT_REVOKED_FRESH` of that read, its answer is used instead of a second read
        of the result backend for every task."""
        if self.backend is None:
            return False
        with self._lock:
            read_at = self._not_revoked.pop(task_id, None)
        if read_at is not None and time.monotonic() - read_at < NOT_REVOKED_FRESH:
            return False
        record = self.backend.get_result(task_id)
        return record is not None and record.state == REVOKED
