"""The :class:`RedisBroker` class: connections, enqueue, claim, settle, wait, recovery, chords,
periodic fire times, results and admin, each one call of a script from ``lua/``."""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, ClassVar

import redis
import redis.exceptions
from redis.connection import AbstractConnection as Connection

from potatoq.brokers.base import (
    Broker,
    BrokerConfig,
    Capabilities,
    ChordJoin,
    DeadLetter,
    Delivery,
    Outcome,
    ProcessLocal,
    QueuedTask,
    RecoverReport,
    WorkerInfo,
    WorkerRef,
    decode_delivery,
    decode_queued,
    validate_queue_name,
)
from potatoq.exceptions import ImproperlyConfigured, OperationalError, WorkerLostError
from potatoq.message import Message

from .admin import RedisAdmin, RedisResults
from .alarm import DueAlarm
from .history import ROLLUP_HOUSEKEEPING, RedisHistory, _evalsha
from .keys import Keys
from .limits import RedisLimits
from .options import RedisOptions, check_server, redis_url
from .packing import (
    _SETTLE_AND_CLAIM,
    _SETTLE_KIND,
    _blocking_command,
    _command,
    _command_once,
    _disconnect,
    _message_fields,
    _messages_fields,
    _ms,
    _Packer,
    _worker_lost_template,
)
from .pause import RedisPause
from .scripts import (
    SCRIPTS,
)
from .unique import mark_duplicates

__all__ = ["RedisBroker"]


log = logging.getLogger("potatoq.brokers.redis")

ENQUEUE_BATCH = 1000  # messages per script call: bounds how long one call blocks the server
REAP_BATCH = 1000  # expired leases recovered per call
# Pauses before a claim that failed on a connection error is looked up and retried: after
# these, its error is raised (a task claimed by a call whose reply never came back is then
# recovered when its lease runs out).
CLAIM_RETRY_PAUSES = (0.0, 0.1, 0.5)
# How much longer than its block a waiting BZPOPMIN's reply may take to come back.
WAIT_READ_MARGIN = 10.0
# The marker member wait_release.lua adds when a timer hands its queue on.
HANDOFF = b"h"
# After interrupt(), wait() returns at once for this long (seconds): a thread that was
# between a claim and its wait when interrupt() ran doesn't block for the whole cap.
INTERRUPT_GRACE = 5.0
# Who holds a task recover() leased to itself to settle it (the caller's own process).
REAPER = WorkerRef("reaper", 0)


# The job hash's state names, as queued_task() reports them.
_QUEUED_STATES = {"delayed": "scheduled", "ready": "ready", "active": "running"}
# The job hash's fields queued_task() reads.
JOB_FIELDS = ("payload", "queue", "priority", "state", "deliveries", "ready_at", "due")


# ----------------------------------------------------------------------------- the broker


class RedisBroker(RedisResults, RedisAdmin, RedisPause, RedisHistory, RedisLimits, Broker):
    """Redis 6.2+ / Valkey 7.2+ broker on redis-py (hiredis parser when installed)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        results_by_default=False,
        leases=True,
        exact_priorities=True,
        interruptible_wait=True,
        concurrency_limits=True,
        rate_limits=True,
        unique_tasks=True,
    )
    schemes: ClassVar[tuple[str, ...]] = ("redis", "rediss", "unix", "valkey", "valkeys")
    #: The client's errors that mean "the server can't be reached" (OperationalError).
    unreachable: ClassVar[tuple[type[Exception], ...]] = (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
    )

    def __init__(self, config: BrokerConfig) -> None:
        super().__init__(config)
        self.options = RedisOptions.from_transport_options(config.transport_options)
        self.keys = Keys(self.options.global_keyprefix)
        self._url = redis_url(config.url)
        self._pack = _Packer(config)
        self._instance = uuid.uuid4().hex[:12]
        self._clients: ProcessLocal[redis.Redis[bytes]] = ProcessLocal(self._connect, lambda c: c.close())
        # Each thread's own connection for the script calls (see _run)
        self._script_conns: ProcessLocal[Connection] = ProcessLocal(self._script_connection, _disconnect)
        self._checked = False
        self._claim_tails: dict[tuple[tuple[str, ...], WorkerRef], tuple[str, ...]] = {}
        self._check_lock = threading.Lock()
        self._waiting_lock = threading.Lock()
        self._waiting: set[str] = set()  # wake keys of threads blocked in wait()
        self._interrupted_until = 0.0  # monotonic time until which wait() returns at once
        self._alarm: DueAlarm | None = None  # this process's (see _due_alarm)
        self._alarm_lock = threading.Lock()

    # -- connections --------------------------------------------------------------------------

    def _connect(self) -> redis.Redis[bytes]:
        tcp: dict[str, Any] = {} if self._url.startswith("unix:") else {"socket_keepalive": True}
        try:
            return redis.Redis.from_url(
                self._url,
                socket_connect_timeout=self.config.connection_timeout,
                socket_timeout=self.options.socket_timeout,
                health_check_interval=self.options.health_check_interval,
                **tcp,
            )
        except ValueError as exc:
            raise ImproperlyConfigured(f"bad Redis broker URL: {exc}") from None

    def _script_connection(self) -> Connection:
        # Checked out of this thread's pool for good (the client's close() disconnects it
        # too): usually the connection the server check already opened.
        conn: Connection = self._client().connection_pool.get_connection()
        return conn

    def _client(self) -> redis.Redis[bytes]:
        """This thread's client (a fresh one in a forked child: never the parent's pool)."""
        client = self._clients.get()
        if not self._checked:
            with self._check_lock:
                if not self._checked:
                    with self._errors():
                        self._check_server(client)
                    self._checked = True
        return client

    def _check_server(self, client: Any) -> None:
        check_server(client)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except self.unreachable as exc:
            self._clients.discard()
            self._script_conns.discard()
            raise OperationalError(f"Redis broker unreachable: {exc}") from exc

    def _run(self, name: str, args: Sequence[str | bytes | int]) -> Any:
        """One EVALSHA of script ``name``; loads the script on NOSCRIPT (after a restart or
        SCRIPT FLUSH) and calls it again."""
        script = SCRIPTS[name]
        with self._errors():
            conn = self._script_conns.get()
            try:
                return _command(conn, "EVALSHA", script.sha, 0, self.keys.prefix, *args)
            except redis.exceptions.NoScriptError:
                _command(conn, "SCRIPT", "LOAD", script.source)
                return _command(conn, "EVALSHA", script.sha, 0, self.keys.prefix, *args)

    def _run_claim(
        self,
        name: str,
        args: Sequence[str | bytes],
        worker: WorkerRef,
        token: str | bytes,
        settled: Delivery | None = None,
        *,
        failed_once: bool = False,
    ) -> Any:
        """One call of a claiming script (``claim``, ``settle_and_claim.*``), retried safely
        after a connection error.

        A claim whose reply was lost after the server ran it must not be sent again
        blindly: it would claim a second task while the first stayed claimed by nobody
        until its lease ran out (a delivery lost). Nor should it just fail, for the same
        reason. So before a retry, ``claim_lost`` looks for the task the failed call
        claimed (``token``, its fencing token, is the request id) and whether it settled
        ``settled``: the script runs again only when it did neither. Returns what the
        script returns.
        """
        lost_args = [worker.node, str(worker.pid), token]
        lost_args += ["", ""] if settled is None else [settled.id, settled.token]
        failures = 1 if failed_once else 0
        with self._errors():
            while True:
                try:
                    conn = self._script_conns.get()
                    if failures:  # the failed call may have run: find out first
                        lost = self._eval_once(conn, "claim_lost", lost_args)
                        if lost[0] == 1:  # it ran and claimed: its reply, rebuilt
                            return lost[2:] if settled is None else [1, *lost[2:]]
                        if settled is not None and lost[1] == 0:  # it ran, settled, claimed nothing
                            return [1]
                    return self._eval_once(conn, name, args)
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                    self._script_conns.discard()
                    if failures >= len(CLAIM_RETRY_PAUSES):
                        raise
                    time.sleep(CLAIM_RETRY_PAUSES[failures])
                    failures += 1

    def _run_claim_after_history(
        self,
        name: str,
        args: Sequence[str | bytes],
        worker: WorkerRef,
        token: str | bytes,
        settled: Delivery | None,
    ) -> Any:
        """:meth:`_run_claim`, with this thread's buffered history records (issue 31) sent in
        the same round trip as the first attempt, so a settle stays one round trip."""
        pending = self._history_due()  # held records ride along once due
        if not pending:
            return self._run_claim(name, args, worker, token, settled)
        try:
            return self._pipelined(pending, _evalsha(self, name, args))[0]
        except OperationalError:
            # The script may have run before the connection failed: ask before resending.
            return self._run_claim(name, args, worker, token, settled, failed_once=True)

    def _eval_once(self, conn: Connection, name: str, args: Sequence[str | bytes]) -> Any:
        """EVALSHA of ``name`` once (no retry), loading the script on NOSCRIPT."""
        script = SCRIPTS[name]
        try:
            return _command_once(conn, "EVALSHA", script.sha, 0, self.keys.prefix, *args)
        except redis.exceptions.NoScriptError:
            _command_once(conn, "SCRIPT", "LOAD", script.source)
            return _command_once(conn, "EVALSHA", script.sha, 0, self.keys.prefix, *args)

    def _run_many(self, name: str, calls: Sequence[Sequence[str | bytes | int]]) -> list[Any]:
        """Several calls of one script in one pipelined round trip. A call refused with
        NOSCRIPT did nothing, so only those are sent again after loading the script."""
        script = SCRIPTS[name]
        client = self._client()
        with self._errors():
            pipe = client.pipeline(transaction=False)
            for args in calls:
                pipe.execute_command("EVALSHA", script.sha, 0, self.keys.prefix, *args)  # type: ignore[no-untyped-call]
            results = pipe.execute(raise_on_error=False)
            missing = [i for i, r in enumerate(results) if isinstance(r, redis.exceptions.NoScriptError)]
            if missing:
                client.execute_command("SCRIPT", "LOAD", script.source)
                for i in missing:
                    results[i] = client.execute_command("EVALSHA", script.sha, 0, self.keys.prefix, *calls[i])
            for r in results:
                if isinstance(r, Exception):
                    raise r
            return list(results)

    # -- messages -----------------------------------------------------------------------------

    def enqueue(self, messages: Sequence[Message], *, connection: Any = None) -> None:
        if connection is not None:
            raise ImproperlyConfigured(
                "the Redis broker can't enqueue through a database connection "
                "(transactional enqueue needs the PostgreSQL or SQLite broker)"
            )
        if not messages:
            return
        calls = [
            _messages_fields(messages[i : i + ENQUEUE_BATCH]) for i in range(0, len(messages), ENQUEUE_BATCH)
        ]
        if len(calls) == 1:
            mark_duplicates(messages, [self._run("enqueue", calls[0])], ENQUEUE_BATCH)
        else:
            mark_duplicates(messages, self._run_many("enqueue", calls), ENQUEUE_BATCH)

    def _claim_args(self, queues: Sequence[str], worker: WorkerRef) -> list[str | bytes]:
        # Everything after the token is the same for every claim of a worker's slot (one
        # entry per queue rotation): validated and formatted once, not per task.
        key = (tuple(queues), worker)
        tail = self._claim_tails.get(key)
        if tail is None:
            names = [validate_queue_name(q) for q in queues]
            lease = str(_ms(self.config.dead_after))
            tail = (lease, worker.node, str(worker.pid), str(len(names)), *names)
            if len(self._claim_tails) >= 256:  # many callers' refs (tests, tools): stay small
                self._claim_tails.clear()
            self._claim_tails[key] = tail
        # A fencing token only has to differ from the claim's other tokens: 64 random bits
        # from the random module (reseeded from os.urandom in every forked child) instead of
        # a getrandom() system call per task.
        return [f"{random.getrandbits(64):016x}", *tail]

    def _delivery(self, reply: Sequence[Any], worker: WorkerRef) -> Delivery:
        task_id, queue, raw, deliveries, token, claimed_ms = reply
        return decode_delivery(
            id=task_id.decode(),
            queue=queue.decode(),
            raw=raw,
            token=token.decode(),
            deliveries=int(deliveries),
            worker=worker,
            claimed_at=int(claimed_ms) / 1000.0,
            max_size=self.config.max_message_size,
        )

    def claim(self, queues: Sequence[str], worker: WorkerRef) -> Delivery | None:
        if not queues:
            return None
        args = self._claim_args(queues, worker)
        reply = self._run_claim("claim", args, worker, args[0])
        return None if reply is None else self._delivery(reply, worker)

    def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        name, args = self._pack.settle(delivery, outcome)
        settled = bool(self._run_after_history(name, args))  # buffered history rides along
        if settled:  # task history (issue 31)
            self._history_settled(delivery, outcome)
        return settled

    def settle_and_claim(
        self, delivery: Delivery, outcome: Outcome, queues: Sequence[str], worker: WorkerRef
    ) -> tuple[bool, Delivery | None]:
        if not queues:
            return self.settle(delivery, outcome), None
        name, args = self._pack.settle(delivery, outcome)
        claim_args = self._claim_args(queues, worker)
        full_args = [_SETTLE_KIND[name], *args, *claim_args]
        reply = self._run_claim_after_history(
            _SETTLE_AND_CLAIM[name], full_args, worker, claim_args[0], delivery
        )
        settled = bool(reply[0])
        if settled:  # task history (issue 31)
            self._history_settled(delivery, outcome)
        return settled, (self._delivery(reply[1:], worker) if len(reply) > 1 else None)

    def wait(self, queues: Sequence[str], timeout: float) -> None:
        """Block on the queues' marker keys until work arrives, a delayed task is due (for
        one waiter: the queue's timer, see ``wait_plan.lua``), or ``timeout`` passes.

        Enqueue arms the marker and claim re-arms it while work remains, and the marker
        persists, so a wake-up sent between "nothing to claim" and this call is not lost.
        """
        names = [validate_queue_name(q) for q in queues]
        self._history_flush()  # idle: buffered history records go out now (issue 31)
        if time.monotonic() < self._interrupted_until:
            return  # interrupt() came before this thread registered as a waiter
        waiter = f"{self._instance}:{threading.get_ident()}"
        # No cap below the caller's timeout: the block is read with its own timeout, not
        # the socket's, so an idle worker blocks as long as it asks (see wait_plan.lua).
        block_ms, timed = self._run("wait_plan", [waiter, str(_ms(timeout)), *names])
        if block_ms < 1:  # something is due already (and 0 would mean "forever")
            return
        wake = self.keys.wake(self._instance)
        block = block_ms / 1000
        # The queue's timer keeps its due time with the local alarm, not with the block's
        # timeout: Redis ends a block only on its cron tick, up to 100 ms late (alarm.py).
        due_at = time.monotonic() + block
        alarm = self._due_alarm().arm(block, wake) if timed else None
        with self._waiting_lock:
            self._waiting.add(wake)
        try:
            with self._errors():
                keys = [*(self.keys.marker(n) for n in names), wake]
                conn = self._script_conns.get()
                # the timer's own block outlasts its due time: the alarm ends it (a second later
                # the server's timeout would, should the alarm's push fail)
                server_block = block + 1.0 if timed else block
                popped = _blocking_command(
                    conn, server_block + WAIT_READ_MARGIN, "BZPOPMIN", *keys, f"{server_block:.3f}"
                )
                while timed and popped and popped[1] == HANDOFF and due_at - time.monotonic() > 0.001:
                    # the timer's hand-off (wait_release.lua), popped by the waiter that holds
                    # the timer now: keep timing rather than wake for nothing
                    left = due_at - time.monotonic() + 1.0
                    popped = _blocking_command(
                        conn, left + WAIT_READ_MARGIN, "BZPOPMIN", *keys, f"{left:.3f}"
                    )
        finally:
            with self._waiting_lock:
                self._waiting.discard(wake)
            if alarm is not None:
                self._due_alarm().disarm(alarm)
        if timed:
            at_due_time = not popped or time.monotonic() >= due_at  # the alarm's push counts as due
            self._run("wait_release", [waiter, timed.decode(), "1" if at_due_time else "0"])

    def interrupt(self) -> None:
        # A thread between its last claim and registering in _waiting would miss the wake
        # key: its wait() returns at once for a while instead (interrupt is a shutdown).
        self._interrupted_until = time.monotonic() + INTERRUPT_GRACE
        with self._waiting_lock:
            wakes = list(self._waiting)
        if wakes:
            self._push_wakes(wakes)

    def _push_wakes(self, wakes: list[str]) -> None:
        """End the waits blocked on these wake keys (or the next wait on each, if none is)."""
        with self._errors():
            pipe = self._client().pipeline(transaction=False)
            for wake in wakes:
                pipe.zadd(wake, {"w": 0})
                pipe.pexpire(wake, 60000)
            pipe.execute()

    def _due_alarm(self) -> DueAlarm:
        with self._alarm_lock:
            alarm = self._alarm
            if alarm is None or alarm.pid != os.getpid():  # a forked child makes its own
                alarm = self._alarm = DueAlarm(self._push_wakes)
            return alarm

    # -- liveness -----------------------------------------------------------------------------

    def heartbeat(self, info: WorkerInfo) -> None:
        # A node silent for two dead_after periods is dead, and every lease it held ran out
        # (its supervisor extended them as it heartbeat): forget its record (a node id is
        # new on each run). Recovery goes by leases, never by these records.
        prune = str(_ms(2 * self.config.dead_after))
        self._run("heartbeat", [info.node, info.encode(), prune])

    def workers(self) -> list[WorkerInfo]:
        with self._errors():
            pipe = self._client().pipeline(transaction=False)
            pipe.zrevrange(self.keys.workers_seen, 0, -1, withscores=True)
            pipe.hgetall(self.keys.workers)
            seen, infos = pipe.execute()
        found = []
        for node, score in seen:
            data = infos.get(node)
            if data is not None:
                found.append(WorkerInfo.decode(data, last_seen=score / 1000.0))
        return found

    def forget_worker(self, node: str) -> None:
        with self._errors():
            pipe = self._client().pipeline(transaction=True)
            pipe.hdel(self.keys.workers, node)
            pipe.zrem(self.keys.workers_seen, node)
            pipe.execute()

    def recover(self, dead_after: float, max_deliveries: int) -> RecoverReport:
        """Reap expired leases in every queue (the lease length is ``worker_dead_after``,
        set at claim and pushed by :meth:`extend`, so ``dead_after`` isn't needed here).

        A task at its delivery limit is settled with :attr:`lost_outcome` when a worker set
        it (its chord joins, its errbacks run): the script leases it to this caller, which
        settles it; if this process dies first, the lease runs out and the next reap hands
        it off again. Without the hook the script dead-letters it with a FAILURE result.

        Then the charts' rollups are built from the history stream's newest records
        (:meth:`roll_up_history`): paid here, in bulk, not by each settle.
        """
        return self._reap(max_deliveries, roll_up=self.config.history.enabled)

    def _reap(self, max_deliveries: int, roll_up: bool = False) -> RecoverReport:
        """The reap of :meth:`recover` (the cluster runs it in each queue's slot); with
        ``roll_up``, a rollup build rides in the same round trip, and more follow while
        the stream holds more to roll up (at most ``ROLLUP_HOUSEKEEPING`` in all)."""
        reason = f"WorkerLostError: the worker died or stopped renewing its lease {max_deliveries} times"
        build = self.lost_outcome
        args: list[str | bytes] = [
            str(max(1, int(max_deliveries))),
            _worker_lost_template(max_deliveries),
            self._pack.result_ttl,
            self._pack.dead_max,
            self._pack.dead_ttl,
            reason,
            str(REAP_BATCH),
            "" if build is None else f"reaped-{random.getrandbits(64):016x}",
            str(_ms(self.config.dead_after)),
        ]
        more = False  # rollups left to build
        if roll_up:
            reply, rolled = self._pipelined((), _evalsha(self, "reap", args), self._rollup_command(), soft=1)
            if isinstance(rolled, Exception):  # the reap applied: its tasks are handled below
                log.warning("building the task history's chart rollups failed: %s", rolled)
            else:
                more = bool(rolled[1])
        else:
            reply = self._run("reap", args)
        requeued, dead, *handed = reply
        self._history_reaped(int(dead))  # task history (issue 31): the script's own dead letters
        for row in handed:  # only when build is set
            delivery = self._delivery(row, REAPER)
            lost = WorkerLostError(
                f"its worker died or stopped renewing its lease {delivery.deliveries} times"
            )
            outcome: Outcome = DeadLetter(reason=reason)
            if build is not None:
                try:
                    outcome = build(delivery, lost)
                except Exception:
                    log.exception("building the failure outcome of reaped task %s failed", delivery.id)
            if self.settle(delivery, outcome):
                dead += 1
        if more:
            self.roll_up_history(ROLLUP_HOUSEKEEPING - 1)
        return RecoverReport(requeued=int(requeued), dead=int(dead))

    def held_by(self, worker: WorkerRef) -> list[Delivery]:
        reply = self._run("held_by", [worker.node, str(worker.pid)])
        return [self._delivery(row, worker) for row in reply]

    def extend(self, deliveries: Sequence[Delivery], ttl: float) -> None:
        if not deliveries:
            return
        args: list[str | bytes] = [str(_ms(ttl)), str(len(deliveries))]
        for delivery in deliveries:
            args += [delivery.id, delivery.token]
        self._run("extend", args)

    # -- chords and periodic tasks ------------------------------------------------------------

    def chord_join(self, join: ChordJoin, *, enqueue_callback: bool = True) -> bool:
        callback: list[str | bytes] = (
            _message_fields(join.callback) if enqueue_callback else ["", "", "", "", b""]
        )
        args = [join.group_id, str(join.index), str(join.size), join.value, self._pack.result_ttl, *callback]
        return bool(self._run("chord_join", args))

    def chord_parts(self, group_id: str) -> list[bytes]:
        with self._errors():
            fields: dict[bytes, bytes] = self._client().hgetall(self.keys.chord(group_id))
        parts = [(int(k[2:]), v) for k, v in fields.items() if k.startswith(b"p:")]
        return [value for _, value in sorted(parts)]

    def claim_fire_time(self, name: str, fire_time: float, message: Message | None) -> bool:
        fields: list[str | bytes] = (
            ["0", "", "", "", "", b""] if message is None else ["1", *_message_fields(message)]
        )
        ttl = str(_ms(self.options.periodic_record_ttl))
        return bool(self._run("periodic_claim", [name, str(round(fire_time * 1000)), ttl, *fields]))

    def last_fire_times(self, names: Sequence[str]) -> dict[str, float]:
        if not names:
            return {}
        with self._errors():
            values: list[bytes | None] = self._client().hmget(self.keys.periodic_last, list(names))
        return {name: float(ms) / 1000 for name, ms in zip(names, values, strict=True) if ms is not None}

    def queued_task(self, task_id: str) -> QueuedTask | None:
        with self._errors():
            values: list[bytes | None] = self._client().hmget(self.keys.job(task_id), JOB_FIELDS)
        return self._queued(task_id, values)

    def _queued(self, task_id: str, values: Sequence[bytes | None]) -> QueuedTask | None:
        """The task from its hash's :data:`JOB_FIELDS` (None: no hash, so finished, revoked
        or never enqueued)."""
        job = dict(zip(JOB_FIELDS, values, strict=True))
        payload, state = job["payload"], (job["state"] or b"").decode()
        if payload is None:
            return None
        # A delayed task is due at 'due'; once ready (or running) it became due at 'ready_at'.
        due_ms = job["due"] if state == "delayed" else job["ready_at"] or job["due"]
        return decode_queued(
            id=task_id,
            queue=(job["queue"] or b"").decode(),
            state=_QUEUED_STATES.get(state, state),
            priority=int(job["priority"] or 0),
            due=None if due_ms is None else float(due_ms) / 1000,
            deliveries=int(job["deliveries"] or 0),
            raw=payload,
            max_size=self.config.max_message_size,
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def migrate(self) -> None:
        """Check the server and load every script now (otherwise done on first use)."""
        client = self._client()
        with self._errors():
            pipe = client.pipeline(transaction=False)
            for script in SCRIPTS.values():
                pipe.script_load(script.source)
            pipe.execute()

    def ping(self) -> None:
        with self._errors():
            self._client().ping()

    def close(self) -> None:
        with suppress(Exception):  # best effort: buffered history records (issue 31)
            self._history_flush()
        alarm = self._alarm
        if alarm is not None and alarm.pid == os.getpid():
            alarm.close()
        self._script_conns.close_all()
        self._clients.close_all()
