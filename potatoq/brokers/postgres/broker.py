"""The :class:`PostgresBroker` class: connections, enqueue, claim, settle, wake-ups and recovery."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import psycopg

from potatoq.exceptions import ImproperlyConfigured, OperationalError
from potatoq.message import Message
from potatoq.utils import mask_url

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
    Requeue,
    ResultRecord,
    RetryLater,
    WorkerRef,
    claim_committed,
    close_when_idle,
    decode_delivery,
    validate_queue_name,
)
from . import migrate, statements, sweep, wakeups
from .admin import PostgresAdmin
from .announce import DueAnnouncer
from .clocks import PROMOTE_BATCH, Poller, PromotionClock, SweepClock
from .history import PostgresHistory
from .limits import TOKEN_RACE_RETRIES, PostgresLimits, frees_a_slot, lost_token_race
from .liveness import PostgresCoordination, PostgresLiveness
from .options import RECONNECT_ERRORS, PostgresOptions, connection_failure, libpq_url
from .pause import PostgresPause
from .results import PostgresResults
from .unique import any_unique, inserted_ids, mark_duplicates, run_through

__all__ = ["PostgresBroker", "PostgresOptions"]

log = logging.getLogger("potatoq.brokers.postgres")

NEVER = 100 * 365 * 86400.0  # result_expires <= 0: keep results (a century)
POLL_MIN = 0.01  # notify=False: first poll after 10 ms, doubling up to poll_interval
INT32 = 2**31


# ----------------------------------------------------------------------------- the broker


class PostgresBroker(
    PostgresResults,
    PostgresAdmin,
    PostgresLiveness,
    PostgresCoordination,
    PostgresPause,
    PostgresHistory,
    PostgresLimits,
    Broker,
):
    """Tasks, results and all other state in PostgreSQL tables, shared by any number of hosts."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        transactional_enqueue=True, concurrency_limits=True, rate_limits=True, unique_tasks=True
    )
    schemes: ClassVar[tuple[str, ...]] = ("postgresql", "postgres")
    connection_errors: ClassVar[tuple[type[BaseException], ...]] = (
        *Broker.connection_errors,
        psycopg.OperationalError,
        psycopg.InterfaceError,
    )

    def __init__(self, config: BrokerConfig) -> None:
        super().__init__(config)
        self.options = PostgresOptions.from_transport_options(config.transport_options)
        self._conninfo = libpq_url(config.url)
        self._channel_prefix = wakeups.channel_prefix(self.options.schema)
        self._conns: ProcessLocal[psycopg.Connection[Any]] = ProcessLocal(self._connect, _close_when_idle)
        self._stmts: statements.Statements | None = None
        self._setup_lock = threading.Lock()
        self._listener = wakeups.PerProcess(self._make_listener)
        self._debouncer = wakeups.PerProcess(self._make_debouncer)
        self._due = DueAnnouncer(self.options, self._channel, self._run)
        self._promotion = wakeups.PerProcess(lambda: PromotionClock(self.options.poll_interval))
        self._sweep = wakeups.PerProcess(SweepClock)
        self._poller = wakeups.PerProcess(Poller)
        self._poll_delay = threading.local()  # per thread: the notify=False backoff
        # Set once this process claims a limited task: from then on claims park the ready
        # tasks of full keys (job_claim's "parking"); before, they skip that work.
        self._limits_seen = False
        self._rates_seen = False  # this process claimed a rate-limited task (limits.py)
        backend = config.result_backend
        self._result_backend = backend if backend is not None and backend is not self else None
        self._dead_ttl = float(config.dead_letter_ttl) if config.dead_letter_ttl > 0 else NEVER
        # one floor for the settle and the sweep: the newest dead letter is always kept
        self._dead_max = max(1, int(config.dead_letter_max))
        self._expires = (
            config.result_expires if config.result_expires and config.result_expires > 0 else NEVER
        )

    # -- connections ------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        """A new autocommit connection: an idle one never holds a transaction open."""
        try:
            return psycopg.connect(
                self._conninfo,
                autocommit=True,
                connect_timeout=max(1, round(self.config.connection_timeout)),
                application_name=self.options.application_name,
                prepare_threshold=5 if self.options.prepared_statements else None,
            )
        except psycopg.Error as exc:
            raise OperationalError(
                f"can't connect to PostgreSQL at {mask_url(self.config.url)}: {exc}"
            ) from exc

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """This thread's connection; a connection error discards it and raises OperationalError."""
        conn = self._conns.get()
        if conn.closed or conn.broken:
            self._conns.discard()
            conn = self._conns.get()
        try:
            yield conn
        except RECONNECT_ERRORS as exc:
            if conn.closed or conn.broken or isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
                self._conns.discard()  # read-only: a standby; a new connection may reach the primary
            raise OperationalError(connection_failure(self.config.url, exc)) from exc

    def _statements(self) -> statements.Statements:
        """The rendered SQL, installing or upgrading the schema on first use."""
        stmts = self._stmts
        if stmts is None:
            with self._setup_lock:
                stmts = self._stmts
                if stmts is None:
                    with self._connection() as conn:
                        migrate.require_server_version(conn.info.server_version)
                        stmts = statements.Statements(self._resolve_schema(conn))
                        self._upgrade(conn, stmts)
                    self._stmts = stmts
        return stmts

    def _upgrade(self, conn: psycopg.Connection[Any], stmts: statements.Statements) -> None:
        try:
            migrate.upgrade(conn, stmts)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ImproperlyConfigured(
                f"can't create potatoq's tables in schema {stmts.schema!r} as this database user "
                f"({exc}); run `potatoq migrate` once as a user who may, or choose a schema with "
                "broker_transport_options={'schema': ...}"
            ) from exc

    def _resolve_schema(self, conn: psycopg.Connection[Any]) -> str:
        if self.options.schema is not None:
            return self.options.schema
        row = conn.execute("SELECT current_schema()").fetchone()
        if row is None or row[0] is None:
            raise ImproperlyConfigured(
                "the PostgreSQL connection has no current schema (empty search_path); set "
                "broker_transport_options={'schema': 'potatoq'}"
            )
        return str(row[0])

    @property
    def schema(self) -> str:
        """The schema holding potatoq's tables (installed on first use)."""
        return self._statements().schema

    def _run(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one named statement on this thread's connection; its rows (if it returns any)."""
        stmt = self._statements()[name]
        with self._connection() as conn:
            cur = conn.execute(stmt.query, params)
            return cur.fetchall() if cur.description is not None else []

    def _make_listener(self) -> wakeups.Listener:
        return wakeups.Listener(
            self._connect,
            lambda channel: self._statements().listen(channel),
            on_due=lambda: self._promotion.get().expect_now(),
        )

    def _make_debouncer(self) -> wakeups.NotifyDebouncer:
        return wakeups.NotifyDebouncer(
            self.options.notify_debounce, self._send_notifies, burst=self.options.notify_burst
        )

    def _send_notifies(self, channels: list[str]) -> None:
        self._run("notify_channels", {"channels": channels, "payload": ""})

    # -- parameters ---------------------------------------------------------------------------

    def _channel(self, queue: str) -> str:
        return wakeups.channel_name(self._channel_prefix, queue)

    def _queues(self, queues: Sequence[str]) -> list[str]:
        if isinstance(queues, str):
            queues = [queues]
        return [validate_queue_name(q) for q in queues]

    def _message_params(
        self, messages: Sequence[Message], prefix: str = "m"
    ) -> tuple[dict[str, Any], set[str]]:
        """Parallel arrays for the unnest() inserts, and the queues that get a ready task.

        No messages (a settle without follow-ups, the usual case) gives NULLs, which unnest()
        turns into no rows as it does empty arrays: psycopg adapts an empty list in Python
        (about 5 us each; a settle has ten of them) and None for nothing.
        """
        if not messages:
            return dict.fromkeys(_array_fields(prefix)), set()
        now = time.time()
        ids, queues, priorities, etas, payloads = [], [], [], [], []
        ready: set[str] = set()
        for message in messages:
            validate_queue_name(message.queue)
            priority = int(message.priority)
            if not -INT32 <= priority < INT32:
                raise ValueError(f"priority {priority} of task {message.id} is outside the 32-bit range")
            ids.append(message.id)
            queues.append(message.queue)
            priorities.append(priority)
            etas.append(None if message.eta is None else float(message.eta))
            payloads.append(message.encode())
            if message.eta is None or message.eta <= now:
                ready.add(message.queue)
        params = {
            f"{prefix}_ids": ids,
            f"{prefix}_queues": queues,
            f"{prefix}_priorities": priorities,
            f"{prefix}_etas": etas,
            f"{prefix}_payloads": payloads,
        }
        return params, ready

    def _enqueue_params(
        self, messages: Sequence[Message], params: dict[str, Any], channels: list[str]
    ) -> dict[str, Any]:
        """job_enqueue's parameters for ``messages`` (already in ``params``), NOTIFYing
        ``channels``: a single message in the scalars, a batch in the arrays."""
        scalars = ("id", "queue", "priority", "eta", "payload")
        unique = any_unique(messages)
        if len(messages) == 1:  # a single delay(): scalars, not six one-element arrays
            single = {name: params[array][0] for name, array in zip(scalars, _array_fields("m"), strict=True)}
            return {
                **dict.fromkeys(params),
                **single,
                "channels": None,
                "channel": channels[0] if channels else None,
                "due_channels": None,
                "unique": unique,
            }
        return {
            **params,
            **dict.fromkeys((*scalars, "due_channels")),
            "channels": channels,
            "channel": None,
            "unique": unique,
        }

    def _admit(self, queues: Iterable[str]) -> tuple[list[str], list[str]]:
        """NOTIFY channels to send inline now, and those held for the debouncer's trailing edge."""
        if not self.options.notify:
            return [], []
        channels = [self._channel(q) for q in queues]
        if self.options.notify_debounce <= 0:
            return channels, []
        return self._debouncer.get().admit(channels)

    def _defer(self, held: list[str]) -> None:
        """After the statement that held these channels committed: their trailing NOTIFY."""
        if held:
            self._debouncer.get().defer(held)

    # -- messages ---------------------------------------------------------------------------

    def enqueue(self, messages: Sequence[Message], *, connection: Any = None) -> None:
        if not messages:
            return
        params, ready = self._message_params(messages)
        if connection is not None:
            self._enqueue_through(connection, messages, params, ready)
            return
        inline, held = self._admit(ready)
        rows = self._run("job_enqueue", self._enqueue_params(messages, params, inline))
        self._defer(held)
        self._due.announce(messages)
        if any_unique(messages):  # a unique task whose key is held: name the holder (unique.py)
            mark_duplicates(messages, inserted_ids(rows), self._run, lambda again: self._resend(again, None))

    def _resend(self, messages: Sequence[Message], connection: Any) -> set[str]:
        """Enqueue ``messages`` again (unique ones whose key was freed meanwhile); the ids stored."""
        params, ready = self._message_params(messages)
        channels = [self._channel(q) for q in sorted(ready)] if self.options.notify else []
        params = self._enqueue_params(messages, params, channels)
        if connection is None:
            return inserted_ids(self._run("job_enqueue", params))
        return inserted_ids(run_through(connection, self._statements()["job_enqueue"], params))

    def _enqueue_through(
        self, connection: Any, messages: Sequence[Message], params: dict[str, Any], ready: set[str]
    ) -> None:
        """The same one-statement insert, inside the caller's open transaction.

        The NOTIFYs aren't debounced here: PostgreSQL sends them at the caller's COMMIT (and
        drops them on ROLLBACK), which the debouncer can't see; duplicates within one
        transaction are folded by the server anyway. So are the 'due' ones (see announce.py).
        """
        channels = [self._channel(q) for q in sorted(ready)] if self.options.notify else []
        params = self._enqueue_params(messages, params, channels)
        params["due_channels"] = self._due.channels(messages) or None  # sent at the caller's commit
        rows = run_through(connection, self._statements()["job_enqueue"], params)
        if any_unique(messages):
            mark_duplicates(
                messages,
                inserted_ids(rows),
                lambda name, args: run_through(connection, self._statements()[name], args),
                lambda again: self._resend(again, connection),
            )

    def _promote_params(self) -> dict[str, Any]:
        return {"limit": PROMOTE_BATCH, "channel_prefix": self._channel_prefix, "notify": self.options.notify}

    def _claim_params(
        self, queues: list[str], worker: WorkerRef, *, no_flush: bool = False
    ) -> dict[str, Any]:
        """job_claim's parameters: a worker of one queue (the usual case) passes it as the
        scalar ``queue``, cheaper to send than a one-element array."""
        one = len(queues) == 1
        return {
            "queues": None if one else queues,
            "queue": queues[0] if one else None,
            "worker": worker.node,
            "pid": worker.pid,
            "no_flush": no_flush,
            "park": self._limits_seen,
        }

    def _delivery(self, row: tuple[Any, ...] | None, worker: WorkerRef) -> Delivery | None:
        if row is None:
            return None
        task_id, queue, deliveries, token, payload, claimed_at = row
        return decode_delivery(
            id=task_id,
            queue=queue,
            raw=payload,
            token=token,
            deliveries=deliveries,
            worker=worker,
            claimed_at=claimed_at,
            max_size=self.config.max_message_size,
        )

    def claim(self, queues: Sequence[str], worker: WorkerRef) -> Delivery | None:
        names = self._queues(queues)
        if not names:
            return None
        stmts = self._statements()
        clock = self._promotion.get()
        for _ in range(TOKEN_RACE_RETRIES):
            deferred: list[tuple[Any, ...]] = []
            with self._connection() as conn:
                # no_flush: this transaction is only the claim (and a promotion); see job_claim
                params = self._claim_params(names, worker, no_flush=True)
                promote = clock.timed_due()
                if promote or self._rates_seen:
                    with conn.pipeline():  # one round trip: promote, move rate waiters, claim
                        promoted = (
                            conn.execute(stmts["job_promote"].query, self._promote_params())
                            if promote
                            else None
                        )
                        moved = self._rate_defer_in(conn, stmts, params)
                        claimed = conn.execute(stmts["job_claim"].query, params)
                    if promoted is not None:
                        clock.promoted(*statements.promotion(promoted.fetchone()))
                    deferred = moved.fetchall() if moved is not None else []
                else:
                    claimed = conn.execute(stmts["job_claim"].query, params)
                row = claimed.fetchone()
            self._rate_deferred(deferred)
            if not lost_token_race(row):
                break
        delivery = self._delivery(None if lost_token_race(row) else row, worker)
        claim_committed("claim", delivery)
        self._claimed(delivery)
        return delivery

    def _claimed(self, delivery: Delivery | None) -> None:
        if delivery is not None:
            self._poll_delay.value = POLL_MIN
            self._limits_seen = self._limits_seen or bool(frees_a_slot(delivery))
            self._rate_claimed(delivery)

    def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        if not _is_token(delivery.token):
            return False  # not a token this broker issued: it can't fence anything here
        name, params, held = self._settle_params(delivery, outcome)
        self._store_elsewhere(outcome)
        rows = self._run_after_history(name, params)  # buffered history rows ride along
        ok = self._settled(rows[0] if rows else None, held, outcome)
        if ok:  # task history (issue 31)
            self._history_settled(delivery, outcome, time.time())
        return ok

    def settle_and_claim(
        self, delivery: Delivery, outcome: Outcome, queues: Sequence[str], worker: WorkerRef
    ) -> tuple[bool, Delivery | None]:
        """The settle and the next claim pipelined: one round trip, one transaction."""
        names = self._queues(queues)
        if not _is_token(delivery.token):
            return False, self.claim(names, worker)
        name, params, held = self._settle_params(delivery, outcome)
        self._store_elsewhere(outcome)
        stmts = self._statements()
        clock = self._promotion.get()
        promoted = None
        # held history rows ride along when due (issue 31)
        with self._history_riding() as pending, self._connection() as conn, conn.pipeline():
            self._history_in(conn, pending)
            settled = conn.execute(stmts[name].query, params)
            if names and clock.timed_due():
                promoted = conn.execute(stmts["job_promote"].query, self._promote_params())
            params = self._claim_params(names, worker)
            moved = self._rate_defer_in(conn, stmts, params) if names else None
            claimed = conn.execute(stmts["job_claim"].query, params) if names else None
        ok = self._settled(settled.fetchone(), held, outcome)
        if ok:  # task history (issue 31)
            self._history_settled(delivery, outcome, time.time())
        if promoted is not None:
            clock.promoted(*statements.promotion(promoted.fetchone()))
        self._rate_deferred(moved.fetchall() if moved is not None else [])
        row = claimed.fetchone() if claimed is not None else None
        if lost_token_race(row):  # another claim took the key's last token: claim again
            return ok, self.claim(names, worker)
        next_delivery = self._delivery(row, worker)
        claim_committed("settle_and_claim", next_delivery)
        self._claimed(next_delivery)
        return ok, next_delivery

    def _store_elsewhere(self, outcome: Outcome) -> None:
        """With a separate result backend, the result goes there *before* the settle commits:
        a failure in between leaves the task claimed (run again, its record overwritten),
        where the other order would lose the result. A stale delivery's result is written
        too; it is a real run's result all the same."""
        record = getattr(outcome, "result", None)
        if self._result_backend is not None and record is not None:
            self._result_backend.store_result(record)

    def _settled(self, row: tuple[Any, ...] | None, held: list[str], outcome: Outcome) -> bool:
        """After a settle statement committed: the trailing NOTIFYs it held back, and the
        due-time announcement of what it scheduled."""
        ok = bool(row and row[0])
        if ok:
            self._defer(held)  # a held chord callback channel whose chord didn't fire: spurious, harmless
            # tell idle workers of a retry's backoff or of follow-ups with a countdown
            scheduled = (
                [outcome.message] if isinstance(outcome, RetryLater) else getattr(outcome, "followups", ())
            )
            self._due.announce(scheduled)
        return ok

    def _settle_params(self, delivery: Delivery, outcome: Outcome) -> tuple[str, dict[str, Any], list[str]]:
        """The statement settling ``outcome``, its parameters and the NOTIFYs it holds back."""
        fence = {"id": delivery.id, "token": delivery.token}
        if isinstance(outcome, Requeue):
            inline, held = self._admit([delivery.queue])
            return "job_requeue", {**fence, "uncount": 0 if outcome.crashed else 1, "channels": inline}, held
        if isinstance(outcome, RetryLater):
            message = outcome.message
            validate_queue_name(message.queue)
            due_now = message.eta is None or message.eta <= time.time()
            inline, held = self._admit(([message.queue] if due_now else []) + frees_a_slot(delivery))
            return (
                "job_retry",
                {
                    **fence,
                    **self._result_params(outcome.result),
                    "eta": None if message.eta is None else float(message.eta),
                    "queue": message.queue,
                    "priority": int(message.priority),
                    "payload": message.encode(),
                    "channels": inline,
                },
                held,
            )
        if isinstance(outcome, Complete | DeadLetter):
            followups, ready = self._message_params(outcome.followups)
            inline, held = self._admit([*ready, *frees_a_slot(delivery)])
            params: dict[str, Any] = {
                **fence,
                **followups,
                **self._result_params(outcome.result),
                "channels": inline or None,
                "task": delivery.message.task if delivery.message is not None else None,
                "reason": outcome.reason if isinstance(outcome, DeadLetter) else None,
                "dead_max": self._dead_max,
            }
            chord_params, chord_held = self._chord_params(outcome.chord, enqueue_callback=True)
            params.update(chord_params)
            return "job_finish", params, held + chord_held
        raise TypeError(f"unknown outcome {outcome!r}")

    def _result_params(self, record: ResultRecord | None) -> dict[str, Any]:
        if record is None or self._result_backend is not None:
            return {"result": None, "result_state": None, "result_expires": self._expires}
        return {"result": record.encode(), "result_state": record.state, "result_expires": self._expires}

    def _chord_params(
        self, join: ChordJoin | None, *, enqueue_callback: bool
    ) -> tuple[dict[str, Any], list[str]]:
        if join is None:
            empty, _ = self._message_params((), "cb")
            params: dict[str, Any] = {
                "chord_id": None,
                "chord_index": None,
                "chord_value": None,
                "chord_size": None,
            }
            return {**params, **empty, "cb_channels": None, "result_expires": self._expires}, []
        callbacks = (join.callback,) if enqueue_callback else ()
        cb_params, ready = self._message_params(callbacks, "cb")
        inline, held = self._admit(ready)
        params = {
            "chord_id": join.group_id,
            "chord_index": int(join.index),
            "chord_value": bytes(join.value),
            "chord_size": int(join.size),
            "cb_channels": inline or None,
            "result_expires": self._expires,
        }
        return {**params, **cb_params}, held

    # -- waiting ----------------------------------------------------------------------------

    def wait(self, queues: Sequence[str], timeout: float) -> None:
        names = self._queues(queues)
        self._history_flush()  # idle: buffered history rows go in now (issue 31)
        clock = self._promotion.get()
        if clock.timed_due():
            rows = self._run("job_promote", self._promote_params())
            count, next_due = statements.promotion(rows[0] if rows else None)
            clock.promoted(count, next_due)
            if count:
                return  # tasks just became ready (in some queue): claim now
        limit = max(0.0, min(timeout, self.options.poll_interval, max(clock.until_due(), 0.001)))
        if not self.options.notify:
            if limit > 0:
                self._poll(limit)
            return
        # even with no time to wait, LISTEN now: a later wait then can't miss a NOTIFY
        self._listener.get().wait([self._channel(q) for q in names], limit)

    def _poll(self, limit: float) -> None:
        delay = getattr(self._poll_delay, "value", POLL_MIN)
        self._poll_delay.value = min(delay * 2, self.options.poll_interval)
        self._poller.get().sleep(min(limit, delay))

    def interrupt(self) -> None:
        listener = self._listener.peek()
        if listener is not None:
            listener.interrupt()
        self._poller.get().interrupt()

    def _housekeeping(self) -> None:
        """Delete expired results, chords and old periodic fire times; trim dead letters."""
        sweep.sweep_expired(self._run)
        self._run("rate_forget_idle")
        self._run(
            "dead_trim",
            {"max": self._dead_max, "ttl": self._dead_ttl},
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def migrate(self) -> None:
        stmts = self._statements()  # installs or upgrades on first use
        with self._connection() as conn:
            self._upgrade(conn, stmts)

    def ping(self) -> None:
        with self._connection() as conn:
            conn.execute("SELECT 1")

    def close(self) -> None:
        with contextlib.suppress(Exception):  # best effort: buffered history rows (issue 31)
            self._history_flush()
        debouncer = self._debouncer.pop()
        if debouncer is not None:
            debouncer.close()  # sends pending trailing NOTIFYs first
        self._due.close()
        listener = self._listener.pop()
        if listener is not None:
            listener.close()
        self._conns.close_all()


def _is_token(token: str) -> bool:
    try:
        uuid.UUID(token)
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def _array_fields(prefix: str) -> tuple[str, ...]:
    """The parallel array parameters of a batch of messages (see _message_params)."""
    return tuple(f"{prefix}_{field}" for field in ("ids", "queues", "priorities", "etas", "payloads"))


def _close_when_idle(conn: psycopg.Connection[Any]) -> None:
    """Close ``conn`` once no statement runs on it (see close_when_idle): psycopg's close()
    frees libpq's connection without taking the lock its statements hold, and another
    thread's statement then read freed memory (errors such as "received 0 results from
    command 'BEGIN'"). That thread's next statement now fails as on a lost connection
    (OperationalError), and its next call reconnects."""
    close_when_idle(conn.lock, conn.close, "PostgreSQL")
