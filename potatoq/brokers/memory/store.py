"""The memory broker's state: one store per URL name (``memory://name``) shared by every
broker object of the process, with its jobs, results, dead letters, chords and fire times
under one lock."""

from __future__ import annotations

import dataclasses
import heapq
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from urllib.parse import urlsplit

from potatoq.brokers.base import (
    ChordJoin,
    DeadLetterRecord,
    WorkerRef,
    validate_queue_name,
)
from potatoq.brokers.limits import concurrency_of_raw, gcra_next, rate_of_raw
from potatoq.brokers.unique import unique_of_raw
from potatoq.exceptions import MessageDecodeError
from potatoq.message import Message

from .history import HistoryLog

SCHEDULED, READY, RUNNING = "scheduled", "ready", "running"
# How many fire times per periodic entry are remembered for dedup; older ones are dropped.
FIRED_KEEP = 1000


@dataclasses.dataclass(slots=True)
class Job:
    id: str
    queue: str
    priority: int
    raw: bytes
    seq: int
    state: str
    run_at: float  # when it is (or became) due
    deliveries: int = 0
    token: str | None = None
    worker: WorkerRef | None = None
    claimed_at: float = 0.0
    limit_key: str | None = None  # concurrency limit (potatoq/brokers/limits.py)
    limit_max: int = 0
    rate_key: str | None = None  # global rate limit (potatoq/brokers/limits.py)
    rate_interval: float = 0.0
    rate_burst: int = 1
    rate_wait: bool = False  # scheduled by the claim until its key's token is due


@dataclasses.dataclass(slots=True)
class Chord:
    parts: dict[int, bytes]
    fired: bool
    expires_at: float


class Store:
    """All state behind one ``memory://NAME``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.enqueued = threading.Condition(self.lock)
        self.result_stored = threading.Condition(self.lock)
        self.seq = 0
        self.jobs: dict[str, Job] = {}
        self.ready: dict[str, list[tuple[int, int, str]]] = {}
        self.scheduled: list[tuple[float, int, str]] = []
        self.known_queues: set[str] = set()
        self.results: dict[str, tuple[bytes, float]] = {}
        self.dead: OrderedDict[int, DeadLetterRecord] = OrderedDict()
        self.chords: dict[str, Chord] = {}
        self.fired: dict[str, OrderedDict[float, None]] = {}
        self.heartbeats: dict[str, tuple[bytes, float]] = {}
        self.limit_overrides: dict[str, int] = {}  # set_limit(): key -> concurrency
        self.rates: dict[str, list[float]] = {}  # rate key -> [tat, defer_at] (GCRA)
        self.rate_overrides: dict[str, tuple[float, int]] = {}  # set_rate(): per second, burst
        self.paused: dict[str, float] = {}  # paused queue -> when (epoch)
        # unique key -> (holder id, released at or None, held while running): the key is
        # held while that job is in ``jobs`` (so removing the job releases it)
        self.unique: dict[str, tuple[str, float | None, bool]] = {}
        self.history = HistoryLog()

    def reinit_locks(self) -> None:
        """In a forked child: a lock held by a parent thread at fork time would never be freed."""
        self.lock = threading.Lock()
        self.enqueued = threading.Condition(self.lock)
        self.result_stored = threading.Condition(self.lock)

    # The helpers below run with ``lock`` held.

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def put(self, job: Job, now: float) -> None:
        """Index ``job`` (already in ``jobs``) as scheduled or ready, by its ``run_at``."""
        self.known_queues.add(job.queue)
        job.token, job.worker = None, None
        if job.run_at > now:
            job.state = SCHEDULED
            heapq.heappush(self.scheduled, (job.run_at, job.seq, job.id))
        else:
            self.make_ready(job)

    def make_ready(self, job: Job) -> None:
        job.state = READY
        heapq.heappush(self.ready.setdefault(job.queue, []), (-job.priority, job.seq, job.id))

    def add_raw(
        self, task_id: str, queue: str, *, priority: int, raw: bytes, run_at: float, now: float
    ) -> bool:
        if task_id in self.jobs:  # already waiting or running: enqueue is a no-op
            return False
        spec = unique_of_raw(raw)
        if spec is not None:
            if self.unique_holder(spec.key, now) not in (None, task_id):
                return False  # another task holds its unique key: not stored
            until = None if spec.seconds is None else now + spec.seconds
            self.unique[spec.key] = (task_id, until, spec.running)
        job = Job(task_id, queue, priority, raw, self.next_seq(), READY, run_at)
        limit = concurrency_of_raw(raw)
        if limit is not None:
            job.limit_key, job.limit_max = limit
        rate = rate_of_raw(raw)
        if rate is not None:
            job.rate_key, job.rate_interval, job.rate_burst = rate[0], 1.0 / rate[1], rate[2]
        self.jobs[task_id] = job
        self.put(job, now)
        return True

    def add_message(self, message: Message, raw: bytes, now: float) -> bool:
        run_at = now if message.eta is None else message.eta
        return self.add_raw(
            message.id, message.queue, priority=message.priority, raw=raw, run_at=run_at, now=now
        )

    def unique_holder(self, key: str, now: float) -> str | None:
        """The id of the job holding unique ``key`` (None when it is free)."""
        held = self.unique.get(key)
        if held is None:
            return None
        holder, until, running = held
        job = self.jobs.get(holder)
        if job is None or (until is not None and until <= now) or (job.state == RUNNING and not running):
            del self.unique[key]
            return None
        return holder

    def duplicate_of(self, message: Message, raw: bytes, now: float) -> str | None:
        """The holder of ``message``'s unique key, when it isn't ``message`` itself."""
        spec = unique_of_raw(raw)
        holder = None if spec is None else self.unique_holder(spec.key, now)
        return None if holder == message.id else holder

    def promote_due(self, now: float) -> None:
        while self.scheduled and self.scheduled[0][0] <= now:
            _, seq, task_id = heapq.heappop(self.scheduled)
            job = self.jobs.get(task_id)
            if job is not None and job.state == SCHEDULED and job.seq == seq:
                job.seq = self.next_seq()  # FIFO by the time it became ready (the contract)
                self.make_ready(job)

    def pop_ready(self, queue: str, now: float) -> Job | None:
        """The best ready job of ``queue`` that its concurrency limits let run, taken off
        the heap; jobs held back by their key's limit keep their place. A job whose rate
        key has no token now is scheduled for when its token is due (:meth:`take_token`)."""
        heap = self.ready.get(queue)
        if not heap:
            return None
        held_back: list[tuple[int, int, str]] = []
        found = None
        while heap:
            entry = heapq.heappop(heap)
            job = self.jobs.get(entry[2])
            if job is None or job.state != READY or job.seq != entry[1]:
                continue
            if not self.key_has_slot(job):
                held_back.append(entry)
                continue
            if not self.take_token(job, now):
                continue  # scheduled at its token's time: off the ready heap
            found = job
            break
        for entry in held_back:
            heapq.heappush(heap, entry)
        return found

    def has_ready(self, queues: Iterable[str]) -> bool:
        for queue in queues:
            for _, seq, task_id in self.ready.get(queue, ()):
                job = self.jobs.get(task_id)
                if job is not None and job.state == READY and job.seq == seq and self.key_has_slot(job):
                    return True
        return False

    # Concurrency limits: the slots in use are the running jobs, counted when asked.

    def running_where(self, key: str) -> int:
        return sum(1 for j in self.jobs.values() if j.state == RUNNING and j.limit_key == key)

    def key_has_slot(self, job: Job) -> bool:
        if job.limit_key is None:
            return True
        limit = self.limit_overrides.get(job.limit_key, job.limit_max)
        return self.running_where(job.limit_key) < limit

    # Rate limits: GCRA per key (see potatoq/brokers/limits.py).

    def rate_of(self, job: Job) -> tuple[float, int]:
        assert job.rate_key is not None
        override = self.rate_overrides.get(job.rate_key)
        if override is not None:
            return 1.0 / override[0], override[1]
        return job.rate_interval, job.rate_burst

    def take_token(self, job: Job, now: float) -> bool:
        """Take a token of ``job``'s rate key, or schedule ``job`` at its token's time."""
        if job.rate_key is None:
            return True
        interval, burst = self.rate_of(job)
        state = self.rates.setdefault(job.rate_key, [0.0, 0.0])
        tat, defer_at = state
        next_at = gcra_next(tat, interval, burst)
        if now >= next_at:
            state[0] = max(tat, now) + interval
            job.rate_wait = False
            return True
        # Tasks of one key wait one interval apart, in the order they were found; one that
        # came back a little before its token (the claim before it was late) takes the
        # next token rather than going to the back of the line.
        job.run_at = next_at if job.rate_wait else max(next_at, defer_at)
        state[1] = max(defer_at, job.run_at + interval)
        job.rate_wait = True
        job.state = SCHEDULED
        heapq.heappush(self.scheduled, (job.run_at, job.seq, job.id))
        return False

    def next_due(self) -> float | None:
        while self.scheduled:
            run_at, seq, task_id = self.scheduled[0]
            job = self.jobs.get(task_id)
            if job is not None and job.state == SCHEDULED and job.seq == seq:
                return run_at
            heapq.heappop(self.scheduled)
        return None

    def store_result(self, task_id: str, encoded: bytes, expires: float, now: float) -> None:
        self.results[task_id] = (encoded, now + expires)
        self.result_stored.notify_all()

    def add_dead(self, record: DeadLetterRecord, limit: int, ttl: float, now: float) -> None:
        self.dead[self.next_seq()] = record
        self.prune_dead(limit, ttl, now)

    def prune_dead(self, limit: int, ttl: float, now: float) -> None:
        while self.dead:
            oldest = next(iter(self.dead.values()))
            if len(self.dead) <= limit and oldest.died_at >= now - ttl:
                break
            self.dead.popitem(last=False)

    def join_chord(self, join: ChordJoin, expires: float, now: float, enqueue_callback: bool) -> bool:
        chord = self.chords.get(join.group_id)
        if chord is None or chord.expires_at <= now:
            chord = self.chords[join.group_id] = Chord({}, False, 0.0)
        chord.expires_at = now + expires
        chord.parts.setdefault(join.index, join.value)  # a second join of an index counts once
        if chord.fired or len(chord.parts) < join.size:
            return False
        chord.fired = True
        if enqueue_callback:
            self.add_message(join.callback, join.callback.encode(), now)
            self.enqueued.notify_all()
        return True


_STORES: dict[str, Store] = {}
_STORES_LOCK = threading.Lock()


def store_for(name: str) -> Store:
    with _STORES_LOCK:
        store = _STORES.get(name)
        if store is None:
            store = _STORES[name] = Store()
        return store


def _after_fork_in_child() -> None:
    global _STORES_LOCK
    _STORES_LOCK = threading.Lock()
    for store in _STORES.values():
        store.reinit_locks()


os.register_at_fork(after_in_child=_after_fork_in_child)


def name_of(url: str) -> str:
    parts = urlsplit(url)
    return (parts.netloc + parts.path).strip("/") or "default"


def encode_checked(message: Message) -> tuple[Message, bytes]:
    validate_queue_name(message.queue)
    return message, message.encode()


def task_name(raw: bytes) -> str | None:
    try:
        return Message.decode(raw).task
    except MessageDecodeError:
        return None


def priority_of(raw: bytes) -> int:
    try:
        return Message.decode(raw).priority
    except MessageDecodeError:
        return 0
