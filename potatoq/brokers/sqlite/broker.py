"""The :class:`SQLiteBroker` class: connections, enqueue, claim, settle, wait and recovery."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from potatoq.exceptions import OperationalError
from potatoq.message import Message

from ..base import (
    Broker,
    BrokerConfig,
    Capabilities,
    ChordJoin,
    Complete,
    DeadLetter,
    Delivery,
    Outcome,
    ProcessLocal,
    RecoverReport,
    Requeue,
    ResultRecord,
    RetryLater,
    WorkerInfo,
    WorkerRef,
    claim_committed,
    decode_delivery,
    validate_queue_name,
)
from ..limits import limit_columns, rate_columns
from ..unique import unique_columns
from .admin import SQLiteAdmin
from .connection import READY, SCHEDULED, ThreadConnection
from .doorbell import Doorbell, Listener, supported
from .history import SQLiteHistory
from .holds import WriteHolds, writer_name
from .limits import SQLiteLimits, rate_defer_in, rate_take_in
from .pause import SQLitePause
from .results import SQLiteResults
from .setup import (
    SQL,
    SQLiteOptions,
    check_local_filesystem,
    check_sqlite_version,
    database_path,
    enable_wal,
    migrate,
)
from .unique import insert_jobs
from .waiting import SQLiteWaiting
from .wal import Checkpoints, WalWatch, no_trim, trim_step

__all__ = ["SQLiteBroker", "SQLiteOptions"]

log = logging.getLogger("potatoq.brokers.sqlite")

# How long claimed periodic fire times are remembered (nobody races for older ones).
PERIODIC_RETENTION = 7 * 86400.0
# Rows deleted per housekeeping write transaction: a few milliseconds of the write lock
# (2,000 held it 100-350 ms on the shared 2-core VM, with 500,000 results; bench-scale).
HOUSEKEEPING_BATCH = 500
# Seconds one recover() call spends deleting expired rows (it runs in the supervisor's
# loop); what is left goes in the next calls.
HOUSEKEEPING_BUDGET = 1.0
# Due scheduled tasks made ready per claim transaction (the rest by the next claims): 1,000
# held the write lock 120-230 ms behind a mass ETA on the same VM.
PROMOTE_BATCH = 200


def _failure_payload(exc_type: str, message: str) -> dict[str, Any]:
    return {"exc_type": exc_type, "exc_message": [message], "exc_module": "potatoq.exceptions"}


class SQLiteBroker(
    SQLiteWaiting, SQLiteResults, SQLiteAdmin, SQLitePause, SQLiteHistory, SQLiteLimits, Broker
):
    """A broker in one local SQLite file, shared by any number of processes on this host."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        transactional_enqueue=True, concurrency_limits=True, rate_limits=True, unique_tasks=True
    )
    schemes: ClassVar[tuple[str, ...]] = ("sqlite",)
    # Most calls turn sqlite3 errors into OperationalError; "database is locked" from a raw
    # read (busy_timeout ran out) is just as retryable.
    connection_errors: ClassVar[tuple[type[BaseException], ...]] = (
        *Broker.connection_errors,
        sqlite3.OperationalError,
    )

    def __init__(self, config: BrokerConfig) -> None:
        super().__init__(config)
        check_sqlite_version(sqlite3.sqlite_version_info, sqlite3.sqlite_version)
        self.options = SQLiteOptions.from_transport_options(config.transport_options)
        self.path = database_path(config.url)
        if not self.options.allow_network_filesystem:
            check_local_filesystem(self.path)
        #: the clock used for due times, claims, heartbeats and expiry (injectable in tests)
        self.clock: Callable[[], float] = time.time
        self._local: ProcessLocal[ThreadConnection] = ProcessLocal(self._open, ThreadConnection.close)
        #: wakes waiting threads (of any process) after each commit; see doorbell
        self._doorbell = Doorbell(self.path) if supported() else None
        self._listeners: set[Listener] = set()  # this process's, rung by interrupt()
        self._schema_ready = False
        self._pid = os.getpid()
        self._wake = threading.Condition()
        self._interrupts = 0
        self._queue_lists: dict[tuple[str, ...], str] = {}
        # Set once this process claims a limited task: from then on claims park the ready
        # tasks of full keys first. Parking only saves work (job_claim itself skips them),
        # so a process that never saw a limit skips that statement.
        self._limits_seen = False
        backend = config.result_backend
        self._result_backend = backend if backend is not None and backend is not self else None
        #: the longest write transaction of this process (logged past ``slow_write_ms``)
        self.write_holds = WriteHolds(self.options.slow_write_ms)
        #: the WAL checkpoints this process ran after its commits (see wal.py)
        self.checkpoints = Checkpoints(self.options.slow_write_ms, self.options.journal_size_limit)

    # -- connections ------------------------------------------------------------------------

    def _open(self) -> ThreadConnection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.options.busy_timeout / 1000,
                isolation_level=None,  # autocommit: an idle connection holds no snapshot
                # ProcessLocal gives each thread its own connection; close_all may run in another
                check_same_thread=False,
                cached_statements=256,
            )
        except sqlite3.Error as exc:
            raise OperationalError(f"can't open the SQLite database {self.path!r}: {exc}") from exc
        try:
            self._set_up(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise OperationalError(f"SQLite database {self.path!r}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return ThreadConnection(conn, WalWatch(self.path + "-wal"))

    def _set_up(self, conn: sqlite3.Connection) -> None:
        """Pragmas and schema for a new connection.

        When many processes open a brand-new file at once (a prefork worker starting), a
        read can meet another connection's WAL initialisation and get SQLITE_BUSY without
        the busy handler being consulted; such a "locked" error here is retried until the
        busy timeout, like any other lock wait.
        """
        deadline = time.monotonic() + self.options.busy_timeout / 1000
        while True:
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self.options.busy_timeout)}")
                enable_wal(conn, self.options.busy_timeout / 1000)
                conn.execute(f"PRAGMA synchronous = {'FULL' if self.options.durable else 'NORMAL'}")
                conn.execute("PRAGMA secure_delete = OFF")  # Debian builds turn it on: extra writes
                # SQLite would checkpoint inside COMMIT (timed as a hold) and cut the WAL
                # file inside the write lock: _write does both after the commit (wal.py)
                conn.execute("PRAGMA wal_autocheckpoint = 0")
                no_trim(conn)
                if not self._schema_ready:
                    migrate(conn, self.clock())
                    self._schema_ready = True
                return
            except sqlite3.OperationalError as exc:
                text = str(exc)
                if ("locked" not in text and "busy" not in text) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    def _conn(self) -> ThreadConnection:
        return self._local.get()

    @contextlib.contextmanager
    def _write(
        self, rings: Collection[str] | None = None, *, checkpoint: bool = True
    ) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction on this thread's connection; once committed, the
        doorbell wakes the threads waiting on ``rings`` (None: every waiting thread, for a
        write that may free work anywhere; empty: nobody), then a WAL checkpoint runs if
        one is due (wal.py), outside the timed hold."""
        local = self._local.get()
        with local.busy:  # see ThreadConnection.busy
            conn = local.conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                locked = time.perf_counter()
                try:
                    yield conn
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                held = time.perf_counter() - locked
                if held > self.write_holds.longest.seconds:
                    self.write_holds.held(held, writer_name())
            except sqlite3.OperationalError as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise OperationalError(f"SQLite database {self.path!r}: {exc}") from exc
            if self._doorbell is not None and (rings is None or rings):
                # committed: a ring that fails (out of file descriptors, say) costs waiters
                # latency, up to their fallback poll, and must not fail the write
                with contextlib.suppress(OSError):
                    self._doorbell.ring(
                        rings, skip=local.listener.token if local.listener is not None else None
                    )
            if checkpoint and local.wal.due():  # after the ring: waiters needn't wait for it
                trim_to = self.checkpoints.run_checkpoint(conn, local.wal)
                if trim_to is not None:
                    self._trim_wal(trim_to)

    def _trim_wal(self, size: int) -> None:
        """Cut the WAL file to ``size`` bytes: one short write transaction of its own
        (wal.py), best effort: the caller's own write has committed already."""
        local = self._local.get()
        try:
            with self._write(rings=(), checkpoint=False) as conn:
                trim_step(conn, size)
        except OperationalError as exc:
            log.debug("SQLite WAL file not trimmed this time: %s", exc)
        finally:
            with contextlib.suppress(sqlite3.Error):
                no_trim(local.conn)

    def _read(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        return self._read_sql(SQL[name], params or {})

    def _read_sql(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run ``sql`` (a statement composed from named ones) on this thread's connection."""
        try:
            local = self._local.get()
            with local.busy:  # see ThreadConnection.busy
                return local.conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            raise OperationalError(f"SQLite database {self.path!r}: {exc}") from exc

    def _queue_list(self, queues: Sequence[str]) -> str:
        """``queues`` validated, as the JSON array the SQL reads with json_each()."""
        key = tuple(queues)
        text = self._queue_lists.get(key)
        if text is None:
            for queue in key:
                validate_queue_name(queue)
            if len(self._queue_lists) > 1000:
                self._queue_lists.clear()
            text = self._queue_lists[key] = json.dumps(list(key))
        return text

    def _expiry(self, now: float) -> float | None:
        expires = self.config.result_expires
        return now + expires if expires and expires > 0 else None

    # -- messages ---------------------------------------------------------------------------

    def _job_row(self, message: Message, now: float) -> dict[str, Any]:
        validate_queue_name(message.queue)
        due = message.eta is None or message.eta <= now
        return {
            "id": message.id,
            "queue": message.queue,
            "task": message.task,
            "priority": int(message.priority),
            "state": READY if due else SCHEDULED,
            "run_at": now if message.eta is None else float(message.eta),
            "payload": message.encode(),
            **limit_columns(message.headers),
            **rate_columns(message.headers),
            **unique_columns(message.headers, now),
        }

    def _insert(self, conn: sqlite3.Connection, messages: Sequence[Message], now: float) -> None:
        insert_jobs(conn, messages, [self._job_row(m, now) for m in messages], now)

    def enqueue(self, messages: Sequence[Message], *, connection: Any = None) -> None:
        if not messages:
            return
        now = self.clock()
        if connection is not None:
            self._enqueue_through(connection, messages, now)
            return
        with self._write(rings={m.queue for m in messages}) as conn:
            self._insert(conn, messages, now)

    def _enqueue_through(self, connection: Any, messages: Sequence[Message], now: float) -> None:
        """Write the rows inside the caller's own transaction (committed or rolled back by them)."""
        raw = getattr(connection, "connection", connection)  # Django's wrapper holds the DB-API one
        if not isinstance(raw, sqlite3.Connection):
            raise TypeError(
                f"the SQLite broker can enqueue through a sqlite3.Connection only, got {type(connection)!r}"
            )
        self._conn()  # makes sure the schema exists
        insert_jobs(raw, messages, [self._job_row(m, now) for m in messages], now)

    def _claim_in(
        self, conn: sqlite3.Connection, queues: Sequence[str], worker: WorkerRef, now: float
    ) -> Delivery | None:
        """Promote due tasks and claim the best ready one, inside an open write transaction."""
        names = self._queue_list(queues)
        for queue in queues:
            if conn.execute(SQL["job_due_any"], {"queue": queue, "now": now}).fetchone() is not None:
                conn.execute(SQL["job_promote_due"], {"queue": queue, "now": now, "limit": PROMOTE_BATCH})
        if self._limits_seen:
            conn.execute(SQL["limit_park_full"], {"queues": names})
        rate_defer_in(conn, names, now)
        token = random.getrandbits(63)
        params = {"token": token, "node": worker.node, "pid": worker.pid, "now": now, "queue": ""}
        for queue in queues:
            params["queue"] = queue
            rows = conn.execute(SQL["job_claim"], params).fetchall()
            if rows:
                task_id, queue_name, deliveries, payload, limit_key, rate_key, interval, burst = rows[0]
                self._limits_seen = self._limits_seen or limit_key is not None
                if rate_key is not None:
                    rate_take_in(conn, rate_key, interval, burst, now)
                return _held(
                    (task_id, queue_name, token, deliveries, payload, now),
                    worker,
                    self.config.max_message_size,
                )
        return None

    def claim(self, queues: Sequence[str], worker: WorkerRef) -> Delivery | None:
        if not queues:
            return None
        now = self.clock()
        ready, due = self._read("job_peek", {"queues": self._queue_list(queues), "now": now})[0]
        if not ready and not due:
            return None  # the cheap read found nothing: no write lock taken
        with self._write(rings=()) as conn:  # a claim makes no work for anyone
            delivery = self._claim_in(conn, queues, worker, now)
        claim_committed("claim", delivery)
        return delivery

    # -- settling -----------------------------------------------------------------------------

    def _settle_in(self, conn: sqlite3.Connection, delivery: Delivery, outcome: Outcome, now: float) -> bool:
        fence = {"id": delivery.id, "token": int(delivery.token)}
        if isinstance(outcome, Complete | DeadLetter):
            rows = conn.execute(SQL["job_delete_claimed"], fence).fetchall()
            if not rows:
                return False
            if isinstance(outcome, DeadLetter):
                queue, task, priority, deliveries, payload = rows[0]
                self._dead_in(
                    conn,
                    task_id=delivery.id,
                    queue=queue,
                    task=task,
                    priority=priority,
                    deliveries=deliveries,
                    payload=payload,
                    reason=outcome.reason,
                    now=now,
                )
            self._result_in(conn, outcome.result, now)
            if outcome.chord is not None:
                self._chord_join_in(conn, outcome.chord, True, now)
            self._insert(conn, outcome.followups, now)
            return True
        if isinstance(outcome, RetryLater):
            row = self._job_row(outcome.message, now)
            del row["id"]
            cursor = conn.execute(SQL["job_retry_later"], {**row, **fence})
            if cursor.rowcount != 1:
                return False
            self._result_in(conn, outcome.result, now)
            return True
        if isinstance(outcome, Requeue):
            params = {**fence, "uncount": 0 if outcome.crashed else 1}
            return conn.execute(SQL["job_requeue"], params).rowcount == 1
        raise TypeError(f"unknown outcome {outcome!r}")

    def _result_in(self, conn: sqlite3.Connection, record: ResultRecord | None, now: float) -> None:
        if record is None or self._result_backend is not None:
            return
        conn.execute(
            SQL["result_upsert"],
            {
                "task_id": record.task_id,
                "state": record.state,
                "payload": record.encode(),
                "expires_at": self._expiry(now),
            },
        )

    def _forward_result(self, outcome: Outcome | None) -> None:
        """With a separate result backend, a settle's result goes there *before* the settle
        commits: the other order loses it if the process dies (or the backend fails) in
        between. This way a failure leaves the task claimed, to be requeued and run again
        (writing the same task's record again). A stale delivery's result is written too;
        it is a real run's result all the same."""
        record = getattr(outcome, "result", None)
        if self._result_backend is not None and record is not None:
            self._result_backend.store_result(record)

    def _dead_in(
        self,
        conn: sqlite3.Connection,
        *,
        task_id: str,
        queue: str,
        task: str | None,
        priority: int,
        deliveries: int,
        payload: bytes,
        reason: str,
        now: float,
    ) -> None:
        conn.execute(
            SQL["dead_insert"],
            {
                "id": task_id,
                "queue": queue,
                "task": task,
                "priority": priority,
                "reason": reason,
                "payload": payload,
                "deliveries": deliveries,
                "now": now,
            },
        )
        conn.execute(SQL["dead_trim_age"], {"cutoff": now - self.config.dead_letter_ttl})
        # at least 1, as on every other broker: the newest dead letter is always kept
        conn.execute(SQL["dead_trim_count"], {"keep": max(1, int(self.config.dead_letter_max))})

    def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        now = self.clock()
        self._forward_result(outcome)
        with self._write_with_history(now) as conn:  # held history rows ride along once due
            settled = self._settle_in(conn, delivery, outcome, now)
        if settled:  # task history (issue 31): the record is built outside the write lock
            self._history_settled(delivery, outcome, now)
        return settled

    def settle_and_claim(
        self, delivery: Delivery, outcome: Outcome, queues: Sequence[str], worker: WorkerRef
    ) -> tuple[bool, Delivery | None]:
        """Settle and claim the next task in one transaction: one write lock per task."""
        now = self.clock()
        next_delivery: Delivery | None = None
        self._forward_result(outcome)
        with self._write_with_history(now) as conn:  # held history rows ride along once due
            settled = self._settle_in(conn, delivery, outcome, now)
            if queues:
                next_delivery = self._claim_in(conn, queues, worker, now)
        if settled:  # task history (issue 31): the record is built outside the write lock
            self._history_settled(delivery, outcome, now)
        claim_committed("settle_and_claim", next_delivery)
        return settled, next_delivery

    # -- liveness -----------------------------------------------------------------------------

    def heartbeat(self, info: WorkerInfo) -> None:
        params = {"node": info.node, "info": info.encode(), "now": self.clock()}
        with self._write(rings=()) as conn:
            conn.execute(SQL["worker_heartbeat"], params)

    def workers(self) -> list[WorkerInfo]:
        return [WorkerInfo.decode(info, last_seen) for info, last_seen in self._read("worker_list")]

    def forget_worker(self, node: str) -> None:
        with self._write() as conn:
            conn.execute(SQL["worker_forget"], {"node": node})

    def held_by(self, worker: WorkerRef) -> list[Delivery]:
        rows = self._read("job_held_by", {"node": worker.node, "pid": worker.pid})
        return [_held(row, worker, self.config.max_message_size) for row in rows]

    def orphaned(self, node: str, live_pids: Sequence[int]) -> list[Delivery]:
        live = json.dumps([int(pid) for pid in live_pids])
        rows = self._read("job_orphaned", {"node": node, "live": live})
        return [_held(row[:6], WorkerRef(node, row[6]), self.config.max_message_size) for row in rows]

    def recover(self, dead_after: float, max_deliveries: int) -> RecoverReport:
        now = self.clock()
        lost_params = {"cutoff": now - dead_after, "max_deliveries": max_deliveries}
        housekeeping_params = {"now": now, "dead_cutoff": now - self.config.dead_letter_ttl}
        # Cheap reads first: most calls find nothing and never take the write lock.
        lost = self._read("job_lost_exists", lost_params)[0][0]
        housekeeping = self._read("housekeeping_due", housekeeping_params)[0][0]
        dead_nodes = self._read("worker_dead_exists", lost_params)[0][0]
        if not lost and not housekeeping and not dead_nodes:
            return RecoverReport()
        requeued = dead = 0
        if lost and self._result_backend is not None:
            # their results first, as a settle's (see _forward_result): a crash before the
            # commit below leaves the tasks to the next recovery, not dead without a result
            for task_id, task, deliveries in self._read("job_lost_list", lost_params):
                reason = _lost_reason(deliveries)
                self._forward_result(Complete(result=self._lost_result(task_id, task, reason, now)))
        with self._write() as conn:
            if lost:
                requeued = conn.execute(SQL["job_requeue_lost"], lost_params).rowcount
                for task_id, queue, task, priority, deliveries, payload in conn.execute(
                    SQL["job_delete_lost"], lost_params
                ).fetchall():
                    dead += 1
                    reason = _lost_reason(deliveries)
                    self._dead_in(
                        conn,
                        task_id=task_id,
                        queue=queue,
                        task=task,
                        priority=priority,
                        deliveries=deliveries,
                        payload=payload,
                        reason=reason,
                        now=now,
                    )
                    self._result_in(conn, self._lost_result(task_id, task, reason, now), now)
                    self._history_lost_in(conn, task_id, task, queue, deliveries, reason, now)  # issue 31
            if dead_nodes:  # after the requeue above: their tasks are recovered by now
                conn.execute(SQL["worker_forget_dead"], lost_params)
            if housekeeping:
                conn.execute(SQL["dead_trim_age"], {"cutoff": housekeeping_params["dead_cutoff"]})
                conn.execute(SQL["rate_forget_idle"], {"now": now})
        if housekeeping:
            self._expire(now)
        return RecoverReport(requeued=requeued, dead=dead)

    def _expire(self, now: float) -> None:
        """Delete expired results and chords in batches, one short write transaction each.

        A single delete of a backlog (after downtime) would hold the only write lock past
        other writers' busy timeout, and they would fail with "database is locked".
        """
        params = {"now": now, "limit": HOUSEKEEPING_BATCH}
        stop_at = time.monotonic() + HOUSEKEEPING_BUDGET
        for names in (("housekeeping_results",), ("housekeeping_chord_parts", "housekeeping_chords")):
            while True:
                started = time.monotonic()
                with self._write(rings=()) as conn:  # deleting expired rows frees no work
                    deleted = [conn.execute(SQL[name], params).rowcount for name in names]
                if deleted[-1] < HOUSEKEEPING_BATCH:
                    break
                took = time.monotonic() - started
                if time.monotonic() + took >= stop_at:
                    return  # the rest in the next calls: this one runs in the supervisor's loop
                # Let other writers in: SQLite's busy handler retries after sleeps of 1 to
                # 100 ms, so batches back to back would starve them as one long one would.
                time.sleep(min(took, 0.05))

    @staticmethod
    def _lost_result(task_id: str, task: str | None, reason: str, now: float) -> ResultRecord:
        from potatoq.states import FAILURE

        return ResultRecord(
            task_id=task_id,
            state=FAILURE,
            result=_failure_payload("WorkerLostError", reason),
            name=task,
            date_done=now,
        )

    # -- chords and periodic tasks ------------------------------------------------------------

    def _chord_join_in(
        self, conn: sqlite3.Connection, join: ChordJoin, enqueue_callback: bool, now: float
    ) -> bool:
        conn.execute(
            SQL["chord_add_part"], {"group_id": join.group_id, "idx": join.index, "value": join.value}
        )
        conn.execute(
            SQL["chord_upsert"],
            {"group_id": join.group_id, "size": join.size, "expires_at": self._expiry(now)},
        )
        fired = bool(conn.execute(SQL["chord_fire"], {"group_id": join.group_id}).fetchall())
        if fired and enqueue_callback:
            self._insert(conn, (join.callback,), now)
        return fired

    def chord_join(self, join: ChordJoin, *, enqueue_callback: bool = True) -> bool:
        now = self.clock()
        with self._write() as conn:
            return self._chord_join_in(conn, join, enqueue_callback, now)

    def chord_parts(self, group_id: str) -> list[bytes]:
        return [
            bytes(value)
            for (value,) in self._read("chord_parts", {"group_id": group_id, "now": self.clock()})
        ]

    def claim_fire_time(self, name: str, fire_time: float, message: Message | None) -> bool:
        now = self.clock()
        with self._write() as conn:
            won = conn.execute(SQL["periodic_claim"], {"name": name, "fire_time": fire_time}).rowcount == 1
            if won:
                conn.execute(
                    SQL["periodic_forget_old"],
                    {"name": name, "cutoff": min(now, fire_time) - PERIODIC_RETENTION},
                )
                if message is not None:
                    self._insert(conn, (message,), now)
        return won

    def last_fire_times(self, names: Sequence[str]) -> dict[str, float]:
        if not names:
            return {}
        rows = self._read("periodic_last", {"names": json.dumps(list(names))})
        return {str(name): float(fire_time) for name, fire_time in rows}

    # -- lifecycle ----------------------------------------------------------------------------

    def migrate(self) -> None:
        self._conn()

    def ping(self) -> None:
        self._read("schema_version")

    def close(self) -> None:
        with contextlib.suppress(Exception):  # best effort: held history rows (issue 31)
            self._history_flush()
        self._local.close_all()


def _lost_reason(deliveries: int) -> str:
    return f"WorkerLostError: the worker running it died {deliveries} times"


def _held(row: tuple[Any, ...], worker: WorkerRef, max_size: int | None) -> Delivery:
    """A running job row (id, queue, token, deliveries, payload, claimed_at) as a delivery
    (a payload over ``max_size`` bytes is left unparsed)."""
    task_id, queue, token, deliveries, payload, claimed_at = row
    return decode_delivery(
        id=task_id,
        queue=queue,
        raw=payload,
        token=str(token),
        deliveries=deliveries,
        worker=worker,
        claimed_at=claimed_at,
        max_size=max_size,
    )
