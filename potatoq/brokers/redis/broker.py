"""The :class:`RedisBroker` class: connections, enqueue, claim, settle, wait, recovery, chords,
periodic fire times, results and admin, each one call of a script from ``lua/``."""

from __future__ import annotations

import json
import logging
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
    DeadLetterRecord,
    Delivery,
    Outcome,
    ProcessLocal,
    QueuedTask,
    QueueStats,
    RecoverReport,
    ResultRecord,
    WorkerInfo,
    WorkerRef,
    decode_delivery,
    decode_queued,
    validate_queue_name,
)
from potatoq.brokers.records import fenced_payload
from potatoq.exceptions import ImproperlyConfigured, MessageDecodeError, OperationalError
from potatoq.message import Message

from .keys import Keys
from .options import RedisOptions, check_server, redis_url
from .packing import (
    _SETTLE_AND_CLAIM,
    _SETTLE_KIND,
    _command,
    _disconnect,
    _message_fields,
    _messages_fields,
    _ms,
    _Packer,
    _worker_lost_template,
)
from .scripts import (
    SCRIPTS,
)

__all__ = ["RedisBroker"]


log = logging.getLogger("potatoq.brokers.redis")

ENQUEUE_BATCH = 1000  # messages per script call: bounds how long one call blocks the server
REAP_BATCH = 1000  # expired leases recovered per call
WORKER_PRUNE_AGE = 86400.0  # heartbeat records silent this long are dropped


# The job hash's state names, as queued_task() reports them.
_QUEUED_STATES = {"delayed": "scheduled", "ready": "ready", "active": "running"}


# ----------------------------------------------------------------------------- the broker


class RedisBroker(Broker):
    """Redis 6.2+ / Valkey 7.2+ broker on redis-py (hiredis parser when installed)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        results_by_default=False,
        leases=True,
        exact_priorities=True,
    )
    schemes: ClassVar[tuple[str, ...]] = ("redis", "rediss", "unix", "valkey", "valkeys")

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
                        check_server(client)
                    self._checked = True
        return client

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
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
            self._run("enqueue", calls[0])
        else:
            self._run_many("enqueue", calls)

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

    @staticmethod
    def _delivery(reply: Sequence[Any], worker: WorkerRef) -> Delivery:
        task_id, queue, raw, deliveries, token, claimed_ms = reply
        return decode_delivery(
            id=task_id.decode(),
            queue=queue.decode(),
            raw=raw,
            token=token.decode(),
            deliveries=int(deliveries),
            worker=worker,
            claimed_at=int(claimed_ms) / 1000.0,
        )

    def claim(self, queues: Sequence[str], worker: WorkerRef) -> Delivery | None:
        if not queues:
            return None
        reply = self._run("claim", self._claim_args(queues, worker))
        return None if reply is None else self._delivery(reply, worker)

    def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        name, args = self._pack.settle(delivery, outcome)
        return bool(self._run(name, args))

    def settle_and_claim(
        self, delivery: Delivery, outcome: Outcome, queues: Sequence[str], worker: WorkerRef
    ) -> tuple[bool, Delivery | None]:
        if not queues:
            return self.settle(delivery, outcome), None
        name, args = self._pack.settle(delivery, outcome)
        claim_args = self._claim_args(queues, worker)
        reply = self._run(_SETTLE_AND_CLAIM[name], [_SETTLE_KIND[name], *args, *claim_args])
        settled = bool(reply[0])
        return settled, (self._delivery(reply[1:], worker) if len(reply) > 1 else None)

    def wait(self, queues: Sequence[str], timeout: float) -> None:
        """Block on the queues' marker keys, at most until the earliest delayed task is due.

        Enqueue arms the marker and claim re-arms it while work remains, and the marker
        persists, so a wake-up sent between "nothing to claim" and this call is not lost.
        """
        names = [validate_queue_name(q) for q in queues]
        client = self._client()
        with self._errors():
            pipe = client.pipeline(transaction=False)
            for name in names:
                pipe.zrange(self.keys.delayed(name), 0, 0, withscores=True)
            pipe.time()
            *firsts, (seconds, micros) = pipe.execute()
            now_ms = seconds * 1000 + micros // 1000
            block = min(timeout, self.options.max_block)
            for first in firsts:
                if first:
                    block = min(block, (first[0][1] - now_ms) / 1000.0)
            if block < 0.001:  # something is due already (and 0 would mean "forever")
                return
            wake = self.keys.wake(self._instance)
            with self._waiting_lock:
                self._waiting.add(wake)
            try:
                client.bzpopmin([*(self.keys.marker(n) for n in names), wake], timeout=block)
            finally:
                with self._waiting_lock:
                    self._waiting.discard(wake)

    def interrupt(self) -> None:
        with self._waiting_lock:
            wakes = list(self._waiting)
        if not wakes:
            return
        with self._errors():
            pipe = self._client().pipeline(transaction=False)
            for wake in wakes:
                pipe.zadd(wake, {"w": 0})
                pipe.pexpire(wake, 60000)
            pipe.execute()

    # -- liveness -----------------------------------------------------------------------------

    def heartbeat(self, info: WorkerInfo) -> None:
        prune = str(_ms(max(WORKER_PRUNE_AGE, 10 * self.config.dead_after)))
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
        set at claim and pushed by :meth:`extend`, so ``dead_after`` isn't needed here)."""
        reason = f"WorkerLostError: the worker died or stopped renewing its lease {max_deliveries} times"
        args: list[str | bytes] = [
            str(max(1, int(max_deliveries))),
            _worker_lost_template(max_deliveries),
            self._pack.result_ttl,
            self._pack.dead_max,
            self._pack.dead_ttl,
            reason,
            str(REAP_BATCH),
        ]
        requeued, dead = self._run("reap", args)
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
        fields = ("payload", "queue", "priority", "state", "deliveries", "ready_at", "due")
        with self._errors():
            values: list[bytes | None] = self._client().hmget(self.keys.job(task_id), fields)
        job = dict(zip(fields, values, strict=True))
        payload, state = job["payload"], (job["state"] or b"").decode()
        if payload is None:  # no hash: finished, revoked or never enqueued
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
        )

    # -- results ------------------------------------------------------------------------------

    def store_result(self, record: ResultRecord) -> None:
        self._run("result_store", [record.task_id, record.encode(), self._pack.result_ttl])

    def store_result_fenced(self, record: ResultRecord, fence: int, *, keep_ready: bool = False) -> bool:
        payload = fenced_payload(record, fence)
        args: list[str | bytes | int] = [
            record.task_id,
            payload,
            self._pack.result_ttl,
            int(fence),
            int(keep_ready),
        ]
        return bool(self._run("result_store_fenced", args))

    def get_result(self, task_id: str) -> ResultRecord | None:
        with self._errors():
            data = self._client().get(self.keys.result(task_id))
        return None if data is None else ResultRecord.decode(data)

    def wait_for_result(self, task_id: str, timeout: float | None) -> ResultRecord | None:
        """Register as a waiter, read the result, then BLPOP the notification list that
        result writes push to only while someone waits (so unwatched results cost nothing)."""
        from potatoq.states import READY_STATES

        deadline = None if timeout is None else time.monotonic() + timeout
        waiting, notify, result = (
            self.keys.waiting(task_id),
            self.keys.notify(task_id),
            self.keys.result(task_id),
        )
        client = self._client()
        expiry = _ms(self.options.max_block + 60.0)
        with self._errors():
            pipe = client.pipeline(transaction=False)
            pipe.incr(waiting)
            pipe.pexpire(waiting, expiry)
            pipe.get(result)
            data = pipe.execute()[2]
            try:
                while True:
                    record = None if data is None else ResultRecord.decode(data)
                    if record is not None and record.state in READY_STATES:
                        return record
                    block = self.options.max_block
                    if deadline is not None:
                        block = min(block, deadline - time.monotonic())
                        if block < 0.001:
                            return record
                    client.blpop([notify], timeout=block)
                    pipe = client.pipeline(transaction=False)
                    pipe.pexpire(waiting, expiry)
                    pipe.get(result)
                    data = pipe.execute()[1]
            finally:
                with suppress(redis.exceptions.RedisError):  # the counter expires on its own
                    client.decr(waiting)

    def forget_result(self, task_id: str) -> None:
        with self._errors():
            self._client().delete(self.keys.result(task_id))

    # -- revocation, dead letters, stats --------------------------------------------------

    def revoke(self, task_id: str) -> bool:
        return bool(self._run("revoke", [task_id]))

    def list_dead(self, limit: int = 100, offset: int = 0) -> list[DeadLetterRecord]:
        # Entries older than dead_letter_ttl are trimmed at the next dead-lettering; hide
        # them meanwhile (judged by this host's clock: listing never writes).
        oldest = int((time.time() - self.config.dead_letter_ttl) * 1_000_000)
        client = self._client()
        with self._errors():
            entries = client.zrevrangebyscore(
                self.keys.dead, "+inf", oldest, start=offset, num=limit, withscores=True
            )
            if not entries:
                return []
            ids = [task_id for task_id, _ in entries]
            pipe = client.pipeline(transaction=False)
            pipe.hmget(self.keys.dead_payload, ids)
            pipe.hmget(self.keys.dead_info, ids)
            payloads, infos = pipe.execute()
        records = []
        for (task_id, score), raw, info in zip(entries, payloads, infos, strict=True):
            if raw is None or info is None:
                continue
            meta = json.loads(info)
            try:
                task: str | None = Message.decode(raw).task
            except MessageDecodeError:
                task = None
            records.append(
                DeadLetterRecord(
                    id=task_id.decode(),
                    queue=meta["queue"],
                    task=task,
                    reason=meta["reason"],
                    raw=raw,
                    died_at=float(meta.get("died") or score / 1000.0) / 1000.0,
                    deliveries=int(meta.get("deliveries") or 0),
                )
            )
        return records

    def retry_dead(self, ids: Sequence[str] | None = None) -> int:
        args = ["1"] if ids is None else ["0", *ids]
        if ids is not None and not ids:
            return 0
        return int(self._run("dead_retry", args))

    def purge_dead(self) -> int:
        return int(self._run("dead_purge", []))

    def queue_stats(self) -> list[QueueStats]:
        reply = self._run("queue_stats", [])
        now_ms = int(reply[0])
        stats = []
        for i in range(1, len(reply), 6):
            name, ready, due, later, active, since = reply[i : i + 6]
            stats.append(
                QueueStats(
                    queue=name.decode(),
                    waiting=int(ready) + int(due),
                    delayed=int(later),
                    running=int(active),
                    oldest_waiting_age=(max(0.0, (now_ms - int(since)) / 1000.0) if since else None),
                )
            )
        return stats

    def purge(self, queues: Sequence[str]) -> int:
        names = [validate_queue_name(q) for q in queues]
        return int(self._run("purge", names)) if names else 0

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
        self._script_conns.close_all()
        self._clients.close_all()
