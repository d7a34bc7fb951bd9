"""The :class:`MemoryBroker` class: every contract operation as one critical section on its store."""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import ClassVar

from potatoq.brokers.base import (
    Broker,
    BrokerConfig,
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
    WorkerInfo,
    WorkerRef,
    decode_delivery,
    decode_queued,
    validate_queue_name,
)
from potatoq.brokers.history import (
    HistoryPage,
    HistoryQuery,
    HistoryRecord,
    LinkedTask,
    for_lost,
    for_revoke,
    for_settle,
)
from potatoq.brokers.records import fenced_payload, stored_fence
from potatoq.exceptions import MessageDecodeError
from potatoq.message import Message
from potatoq.states import FAILURE, READY_STATES

from .limits import MemoryLimits
from .pause import MemoryPause
from .store import (
    FIRED_KEEP,
    READY,
    RUNNING,
    SCHEDULED,
    Job,
    Store,
    encode_checked,
    name_of,
    priority_of,
    store_for,
    task_name,
)

__all__ = ["MemoryBroker"]


class MemoryBroker(MemoryPause, MemoryLimits, Broker):
    """All tasks, results and heartbeats in this process's memory; see the module docstring."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        multiprocess=False,
        crash_safe_storage=False,
        transactional_enqueue=False,
        concurrency_limits=True,
        rate_limits=True,
        unique_tasks=True,
    )
    schemes: ClassVar[tuple[str, ...]] = ("memory",)

    def __init__(self, config: BrokerConfig) -> None:
        super().__init__(config)
        self.name = name_of(config.url)
        self._store = store_for(self.name)

    # -- messages ---------------------------------------------------------------------------

    def enqueue(self, messages: Sequence[Message], *, connection: object = None) -> None:
        if connection is not None:
            raise TypeError("memory:// has no database connection to enqueue through")
        # Validate and encode everything first: a bad message leaves the store untouched.
        encoded = [encode_checked(m) for m in messages]
        store = self._store
        with store.lock:
            now = time.time()
            for message, raw in encoded:
                holder = store.duplicate_of(message, raw, now)
                if holder is not None:
                    message.mark_duplicate(holder)
                    continue
                store.add_message(message, raw, now)
            store.enqueued.notify_all()

    def claim(self, queues: Sequence[str], worker: WorkerRef) -> Delivery | None:
        for queue in queues:
            validate_queue_name(queue)
        store = self._store
        with store.lock:
            now = time.time()
            store.promote_due(now)
            for queue in queues:
                job = store.pop_ready(queue, now)
                if job is None:
                    continue
                job.state = RUNNING
                job.deliveries += 1
                job.token = uuid.uuid4().hex
                job.worker = worker
                job.claimed_at = now
                break
            else:
                return None
            # Copy what the delivery needs while the lock is held, decode outside it.
            task_id, raw, token, deliveries = job.id, job.raw, job.token, job.deliveries
        return decode_delivery(
            id=task_id,
            queue=queue,
            raw=raw,
            token=token,
            deliveries=deliveries,
            worker=worker,
            claimed_at=now,
            max_size=self.config.max_message_size,
        )

    def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        # Encode outside the lock, so a serialization error changes nothing.
        result = None if isinstance(outcome, Requeue) else outcome.result
        encoded_result = None if result is None else result.encode()
        followups: list[tuple[Message, bytes]] = []
        chord: ChordJoin | None = None
        if isinstance(outcome, Complete | DeadLetter):
            followups = [encode_checked(m) for m in outcome.followups]
            chord = outcome.chord
        retry_raw = None
        if isinstance(outcome, RetryLater):
            if outcome.message.id != delivery.id:
                raise ValueError(f"RetryLater message id {outcome.message.id!r} != task id {delivery.id!r}")
            validate_queue_name(outcome.message.queue)
            retry_raw = outcome.message.encode()

        store = self._store
        config = self.config
        with store.lock:
            job = store.jobs.get(delivery.id)
            if job is None or job.state != RUNNING or job.token != delivery.token:
                return False
            now = time.time()
            if isinstance(outcome, Requeue):
                if not outcome.crashed:
                    job.deliveries = max(0, job.deliveries - 1)
                job.run_at = now
                store.make_ready(job)  # same seq: it goes back to its place in line
                job.token, job.worker = None, None
                store.enqueued.notify_all()
                return True
            if isinstance(outcome, RetryLater):
                assert retry_raw is not None
                message = outcome.message
                job.raw, job.queue, job.priority = retry_raw, message.queue, message.priority
                job.run_at = now if message.eta is None else message.eta
                job.deliveries = 0
                job.seq = store.next_seq()
                store.put(job, now)
                store.enqueued.notify_all()
            else:
                del store.jobs[job.id]
                if isinstance(outcome, DeadLetter):
                    record = DeadLetterRecord(
                        id=job.id,
                        queue=job.queue,
                        task=delivery.message.task if delivery.message else task_name(job.raw),
                        reason=outcome.reason,
                        raw=job.raw,
                        died_at=now,
                        deliveries=job.deliveries,
                    )
                    store.add_dead(record, config.dead_letter_max, config.dead_letter_ttl, now)
                for message, raw in followups:
                    store.add_message(message, raw, now)
                if chord is not None:
                    store.join_chord(chord, config.result_expires, now, enqueue_callback=True)
                if followups or job.limit_key is not None or store.limit_overrides:
                    store.enqueued.notify_all()  # new tasks, or a freed slot
            if encoded_result is not None and result is not None:
                store.store_result(result.task_id, encoded_result, config.result_expires, now)
            # task history (issue 31)
            store.history.add(for_settle(delivery, outcome, now, config.history), config.history, now)
            return True

    def wait(self, queues: Sequence[str], timeout: float) -> None:
        store = self._store
        with store.lock:
            now = time.time()
            store.promote_due(now)
            if store.has_ready(queues):
                return
            due = store.next_due()
            if due is not None:
                timeout = min(timeout, max(0.0, due - now))
            # One wait, no loop: any enqueue (or interrupt) returns; the caller claims after.
            store.enqueued.wait(max(0.0, timeout))

    def interrupt(self) -> None:
        with self._store.lock:
            self._store.enqueued.notify_all()

    # -- liveness ---------------------------------------------------------------------------

    def heartbeat(self, info: WorkerInfo) -> None:
        encoded = info.encode()
        with self._store.lock:
            self._store.heartbeats[info.node] = (encoded, time.time())

    def workers(self) -> list[WorkerInfo]:
        with self._store.lock:
            beats = list(self._store.heartbeats.values())
        infos = [WorkerInfo.decode(raw, last_seen=seen) for raw, seen in beats]
        return sorted(infos, key=lambda w: w.last_seen, reverse=True)

    def forget_worker(self, node: str) -> None:
        with self._store.lock:
            self._store.heartbeats.pop(node, None)

    def held_by(self, worker: WorkerRef) -> list[Delivery]:
        return self._running_where(lambda holder: holder == worker)

    def orphaned(self, node: str, live_pids: Sequence[int]) -> list[Delivery]:
        live = set(live_pids)
        return self._running_where(lambda holder: holder.node == node and holder.pid not in live)

    def _running_where(self, holder_matches: Callable[[WorkerRef], bool]) -> list[Delivery]:
        """Running jobs whose holder matches, oldest claim first."""
        with self._store.lock:
            held = sorted(
                (
                    (j, j.worker)
                    for j in self._store.jobs.values()
                    if j.state == RUNNING and j.worker is not None and holder_matches(j.worker)
                ),
                key=lambda pair: pair[0].claimed_at,
            )
            rows = [(j.id, j.queue, j.raw, j.token or "", j.deliveries, j.claimed_at, w) for j, w in held]
        return [
            decode_delivery(
                id=task_id,
                queue=queue,
                raw=raw,
                token=token,
                deliveries=n,
                worker=holder,
                claimed_at=at,
                max_size=self.config.max_message_size,
            )
            for task_id, queue, raw, token, n, at, holder in rows
        ]

    def recover(self, dead_after: float, max_deliveries: int) -> RecoverReport:
        store = self._store
        requeued = dead = 0
        with store.lock:
            now = time.time()
            for job in list(store.jobs.values()):
                if job.state != RUNNING or job.worker is None:
                    continue
                beat = store.heartbeats.get(job.worker.node)
                last_sign_of_life = beat[1] if beat is not None else job.claimed_at
                if now - last_sign_of_life <= dead_after:
                    continue
                if job.deliveries < max_deliveries:
                    job.run_at = now
                    store.make_ready(job)  # the crashed delivery keeps counting
                    job.token, job.worker = None, None
                    requeued += 1
                    continue
                self._dead_letter_lost(job, max_deliveries, now)
                dead += 1
            if requeued or dead:
                store.enqueued.notify_all()
        return RecoverReport(requeued=requeued, dead=dead)

    def _dead_letter_lost(self, job: Job, max_deliveries: int, now: float) -> None:
        """With the lock held: a task whose holders kept dying goes to the dead letters."""
        store, config = self._store, self.config
        holder = job.worker
        reason = (
            f"WorkerLostError: the worker running the task died {job.deliveries} times "
            f"(task_max_deliveries={max_deliveries}); last holder {holder.node if holder else '?'}"
            f" pid {holder.pid if holder else '?'}"
        )
        del store.jobs[job.id]
        try:
            message: Message | None = Message.decode(job.raw)
        except MessageDecodeError:
            message = None
        store.add_dead(
            DeadLetterRecord(
                id=job.id,
                queue=job.queue,
                task=message.task if message else None,
                reason=reason,
                raw=job.raw,
                died_at=now,
                deliveries=job.deliveries,
            ),
            config.dead_letter_max,
            config.dead_letter_ttl,
            now,
        )
        name = message.task if message else None  # task history (issue 31):
        lost = for_lost(job.id, name, job.queue, job.deliveries, reason, now, config.history)
        store.history.add(lost, config.history, now)
        record = ResultRecord(
            task_id=job.id,
            state=FAILURE,
            result={
                "exc_type": "WorkerLostError",
                "exc_message": reason.split(": ", 1)[1],
                "exc_module": "potatoq.exceptions",
            },
            name=message.task if message else None,
            retries=message.retries if message else 0,
            date_done=now,
        )
        store.store_result(job.id, record.encode(), config.result_expires, now)

    # -- chords and periodic tasks ------------------------------------------------------------

    def chord_join(self, join: ChordJoin, *, enqueue_callback: bool = True) -> bool:
        if enqueue_callback:
            validate_queue_name(join.callback.queue)
        with self._store.lock:
            return self._store.join_chord(
                join, self.config.result_expires, time.time(), enqueue_callback=enqueue_callback
            )

    def chord_parts(self, group_id: str) -> list[bytes]:
        with self._store.lock:
            chord = self._store.chords.get(group_id)
            if chord is None or chord.expires_at <= time.time():
                self._store.chords.pop(group_id, None)
                return []
            return [value for _, value in sorted(chord.parts.items())]

    def claim_fire_time(self, name: str, fire_time: float, message: Message | None) -> bool:
        raw = None
        if message is not None:
            validate_queue_name(message.queue)
            raw = message.encode()
        store = self._store
        with store.lock:
            fired = store.fired.setdefault(name, OrderedDict())
            if fire_time in fired:
                return False
            fired[fire_time] = None
            while len(fired) > FIRED_KEEP:
                fired.popitem(last=False)
            if message is not None and raw is not None:
                store.add_message(message, raw, time.time())
                store.enqueued.notify_all()
            return True

    def last_fire_times(self, names: Sequence[str]) -> dict[str, float]:
        with self._store.lock:
            fired = {name: self._store.fired.get(name) for name in names}
            return {name: max(times) for name, times in fired.items() if times}

    def queued_task(self, task_id: str) -> QueuedTask | None:
        with self._store.lock:
            job = self._store.jobs.get(task_id)
            if job is None:
                return None
            # Copied under the lock: a claim or settle may change the job right after.
            fields = (job.queue, job.state, job.priority, job.run_at, job.deliveries, job.raw)
        queue, state, priority, run_at, deliveries, raw = fields
        return decode_queued(
            id=task_id,
            queue=queue,
            state=state,
            priority=priority,
            due=run_at,
            deliveries=deliveries,
            raw=raw,
            max_size=self.config.max_message_size,
        )

    # -- results ------------------------------------------------------------------------------

    def store_result(self, record: ResultRecord) -> None:
        encoded = record.encode()
        with self._store.lock:
            self._store.store_result(record.task_id, encoded, self.config.result_expires, time.time())

    def store_result_fenced(self, record: ResultRecord, fence: int, *, keep_ready: bool = False) -> bool:
        now = time.time()
        with self._store.lock:
            current = self._get_locked(record.task_id, now)
            if current is not None:
                if keep_ready:
                    if current.state in READY_STATES:
                        return False
                elif stored_fence(self._store.results[record.task_id][0]) > fence:
                    return False
            self._store.store_result(
                record.task_id, fenced_payload(record, fence), self.config.result_expires, now
            )
        return True

    def _get_locked(self, task_id: str, now: float) -> ResultRecord | None:
        entry = self._store.results.get(task_id)
        if entry is None:
            return None
        encoded, expires_at = entry
        if expires_at <= now:
            del self._store.results[task_id]
            return None
        return ResultRecord.decode(encoded)

    def get_result(self, task_id: str) -> ResultRecord | None:
        with self._store.lock:
            return self._get_locked(task_id, time.time())

    def wait_for_result(self, task_id: str, timeout: float | None) -> ResultRecord | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        store = self._store
        with store.lock:
            while True:
                record = self._get_locked(task_id, time.time())
                if record is not None and record.state in READY_STATES:
                    return record
                if deadline is None:
                    store.result_stored.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return record
                store.result_stored.wait(remaining)

    def forget_result(self, task_id: str) -> None:
        with self._store.lock:
            self._store.results.pop(task_id, None)

    # -- task history -------------------------------------------------------------------------

    def history(self, query: HistoryQuery) -> HistoryPage:
        with self._store.lock:
            return self._store.history.page(query)

    def history_links(self, *, parent_id: str | None = None, group_id: str | None = None) -> list[LinkedTask]:
        with self._store.lock:
            return self._store.history.links(parent_id, group_id)

    def append_history(self, records: Sequence[HistoryRecord]) -> None:
        with self._store.lock:
            now = time.time()
            for record in records:
                self._store.history.add(record, self.config.history, now)

    # -- revocation, dead letters, stats --------------------------------------------------

    def revoke(self, task_id: str) -> bool:
        with self._store.lock:
            job = self._store.jobs.get(task_id)
            if job is None or job.state == RUNNING:
                return False
            del self._store.jobs[task_id]  # its heap entries are skipped when popped
            now = time.time()
            revoked = for_revoke(task_id, task_name(job.raw), job.queue, now, self.config.history)
            self._store.history.add(revoked, self.config.history, now)
            return True

    def list_dead(self, limit: int = 100, offset: int = 0) -> list[DeadLetterRecord]:
        with self._store.lock:
            self._store.prune_dead(self.config.dead_letter_max, self.config.dead_letter_ttl, time.time())
            newest_first = list(reversed(self._store.dead.values()))
        return newest_first[offset : offset + limit]

    def retry_dead(self, ids: Sequence[str] | None = None) -> int:
        store = self._store
        retried = 0
        with store.lock:
            now = time.time()
            wanted = None if ids is None else set(ids)
            newest: dict[str, int] = {}  # id -> key of its latest death
            for key, record in store.dead.items():
                if wanted is None or record.id in wanted:
                    newest[record.id] = key
            for key in sorted(newest.values()):  # back in the order they died
                record = store.dead[key]
                # An id already waiting or running keeps its dead letter (and so do the older
                # deaths of an id restored here): retrying must never drop a payload.
                if store.add_raw(
                    record.id,
                    record.queue,
                    priority=priority_of(record.raw),
                    raw=record.raw,
                    run_at=now,
                    now=now,
                ):
                    del store.dead[key]
                    retried += 1
            if retried:
                store.enqueued.notify_all()
        return retried

    def purge_dead(self) -> int:
        with self._store.lock:
            count = len(self._store.dead)
            self._store.dead.clear()
        return count

    def queue_stats(self) -> list[QueueStats]:
        store = self._store
        with store.lock:
            now = time.time()
            store.promote_due(now)
            counts = {q: [0, 0, 0] for q in store.known_queues}
            oldest: dict[str, float] = {}
            for job in store.jobs.values():
                row = counts.setdefault(job.queue, [0, 0, 0])
                if job.state == READY:
                    row[0] += 1
                    oldest[job.queue] = min(oldest.get(job.queue, job.run_at), job.run_at)
                elif job.state == SCHEDULED:
                    row[1] += 1
                else:
                    row[2] += 1
        return [
            QueueStats(
                queue=queue,
                waiting=waiting,
                delayed=delayed,
                running=running,
                oldest_waiting_age=max(0.0, now - oldest[queue]) if queue in oldest else None,
            )
            for queue, (waiting, delayed, running) in sorted(counts.items())
        ]

    def purge(self, queues: Sequence[str]) -> int:
        names = {validate_queue_name(q) for q in queues}
        store = self._store
        with store.lock:
            doomed = [j.id for j in store.jobs.values() if j.queue in names and j.state != RUNNING]
            for task_id in doomed:
                del store.jobs[task_id]
        return len(doomed)

    # -- test helpers -------------------------------------------------------------------------

    def fast_forward(self) -> int:
        """Make every scheduled task ready now (``potatoq.testing.drain`` uses this so that
        unit tests don't wait for countdowns and retry backoff). Returns how many."""
        store = self._store
        with store.lock:
            before = sum(1 for job in store.jobs.values() if job.state == SCHEDULED)
            store.promote_due(float("inf"))
            store.enqueued.notify_all()
        return before

    def flush(self) -> None:
        """Forget everything stored under this URL name (tasks, results, dead letters, ...)."""
        store = self._store
        with store.lock:
            fresh = Store()
            for field in ("seq", "jobs", "ready", "scheduled", "known_queues", "results", "dead"):
                setattr(store, field, getattr(fresh, field))
            store.chords, store.fired, store.heartbeats, store.paused = {}, {}, {}, {}

    def _put_raw(self, queue: str, raw: bytes, task_id: str | None = None) -> str:
        """Store ``raw`` as a ready task without decoding it (tests inject garbage this way)."""
        validate_queue_name(queue)
        task_id = task_id or uuid.uuid4().hex
        with self._store.lock:
            now = time.time()
            self._store.add_raw(task_id, queue, priority=0, raw=raw, run_at=now, now=now)
            self._store.enqueued.notify_all()
        return task_id
