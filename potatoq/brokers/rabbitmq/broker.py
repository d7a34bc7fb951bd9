"""The :class:`RabbitMQBroker` class: enqueue, claim, settle, wait, hard time limits, chords,
periodic fire times and the result-backend hand-offs."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import ssl
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, ClassVar

import pika

from potatoq.brokers import limits
from potatoq.brokers.base import (
    Broker,
    BrokerConfig,
    Capabilities,
    ChordJoin,
    Complete,
    DeadLetter,
    Delivery,
    Outcome,
    QueuedTask,
    Requeue,
    ResultRecord,
    RetryLater,
    WorkerRef,
    decode_delivery,
    validate_queue_name,
)
from potatoq.brokers.rabbitmq import declare, delay
from potatoq.brokers.rabbitmq.consume import Intake, Pending
from potatoq.brokers.rabbitmq.io import AmqpLink
from potatoq.brokers.rabbitmq.lease import SchedulerLease
from potatoq.brokers.rabbitmq.nodes import split_nodes
from potatoq.brokers.rabbitmq.ops import Publish
from potatoq.brokers.rabbitmq.options import RabbitMQOptions
from potatoq.brokers.rabbitmq.session import Outgoing, Session, properties_for
from potatoq.brokers.rabbitmq.topology import (
    H_DELIVERIES,
    H_DIED_AT,
    H_ONCE,
    H_QUEUE,
    H_REASON,
    CheckedNames,
    Topology,
)
from potatoq.exceptions import ImproperlyConfigured, MessageDecodeError
from potatoq.message import Message
from potatoq.states import FAILURE, READY_STATES, REVOKED
from potatoq.utils import mask_url

from .admin import RabbitMQAdmin
from .backed import FIRED_KEEP, RabbitMQBacked
from .history import RabbitMQHistory
from .kills import RabbitMQKills
from .limits import H_RATE_TOKEN, RabbitMQLimits
from .pause import RabbitMQPause
from .unique import RabbitMQUnique

__all__ = ["RabbitMQBroker"]

log = logging.getLogger("potatoq.brokers.rabbitmq")

# State made in a parent process, parked here in a forked child so that it is never used,
# closed or garbage collected there (the socket is shared with the parent).
_INHERITED: list[object] = []
# Every broker of this process: a forked child gives each a fresh lock (see _after_fork).
_BROKERS: weakref.WeakSet[RabbitMQBroker] = weakref.WeakSet()


def _after_fork() -> None:
    """In a forked child: another thread of the parent (a caller, or the pika I/O thread
    running an operation) may have held a broker's lock at the fork, and the child's copy
    would stay locked. Everything else the child uses is made anew there (``_process``);
    the parent's connection state is parked, never touched."""
    for broker in list(_BROKERS):
        broker._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)

#: Messages per confirmed publish batch (one wait for the confirms of each batch).
BATCH = 2000
#: Time allowed per message of a batch for its confirm, on top of broker_connection_timeout.
PER_MESSAGE = 0.002


class _ProcessState:
    """This process's link and what runs on it."""

    def __init__(self, broker: RabbitMQBroker) -> None:
        self.pid = os.getpid()
        self.link = AmqpLink(
            broker._parameters(),
            describe=mask_url(broker.config.url),
            connect_timeout=broker.config.connection_timeout,
            on_connected=self._on_connected,
            on_work_channel_lost=self._on_work_channel_lost,
            prefetch=broker.prefetch,
        )
        self.session = Session(self.link, broker.topology, cascade_key=broker.config.url)
        self.intake = Intake(self.session, hold=broker.options.prefetch_hold)
        self.link.on_tick = self.intake.hand_back_stale
        self.lease = SchedulerLease(self.session)

    def _on_connected(self, _link: AmqpLink) -> None:
        self.intake.on_connected()
        self.lease.on_connected()

    def _on_work_channel_lost(self, _link: AmqpLink) -> None:
        self.intake.on_work_channel_lost()


class RabbitMQBroker(
    RabbitMQBacked,
    RabbitMQAdmin,
    RabbitMQPause,
    RabbitMQHistory,
    RabbitMQKills,
    RabbitMQLimits,
    RabbitMQUnique,
    Broker,
):
    """Quorum queues, a TTL delay cascade and a result backend for everything else."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        transactional_enqueue=False,
        stores_results=False,  # results need config.result_backend
        results_by_default=False,
        supervisor_settles=False,  # only the channel a delivery came on can ack it
        lists_holders=False,  # a channel's unacked deliveries can't be listed from outside
        exact_priorities=False,  # priority bands, FIFO inside a band
        leases=False,
        revoke_deletes=False,  # revoked ids are recorded and skipped at claim
        unique_ids=False,  # a queue can't be searched for an id
        atomic_settle=False,  # publish (confirmed), then ack; results in another store
        recovers_dead_holders=False,  # RabbitMQ requeues when the holder's connection closes
        full_stats=False,  # passive declares count ready messages only
        finds_queued=False,  # a queued message is only seen when it is delivered
        # Slots, tokens and keys in the result backend (.store: Redis, PostgreSQL or SQLite);
        # over its limit a task is parked in the delay cascade (.limits), a duplicate is
        # never published (.unique).
        concurrency_limits=True,
        rate_limits=True,
        unique_tasks=True,
    )
    schemes: ClassVar[tuple[str, ...]] = ("amqp", "amqps")

    def __init__(self, config: BrokerConfig) -> None:
        super().__init__(config)
        self.options = RabbitMQOptions.from_mapping(config.transport_options)
        self.nodes = split_nodes(config.url)  # the cluster's nodes, in the order tried
        timeout = self.options.consumer_timeout
        if timeout is None:
            timeout = config.task_time_limit + 300.0
        self.topology = Topology(
            prefix=self.options.queue_prefix,
            bands=self.options.priority_bands,
            max_deliveries=max(1, config.max_deliveries),
            consumer_timeout_ms=int(timeout * 1000),
            dead_letter_max=max(1, config.dead_letter_max),
            dead_letter_ttl_ms=int(config.dead_letter_ttl * 1000),
        )
        self.backend: Broker | None = config.result_backend
        self._own_backend = False
        if self.backend is not None and (
            self.backend.config.result_expires != config.result_expires
            or self.backend.config.history != config.history
        ):
            # Results (and chord parts) expire after *this* config's result_expires; the
            # task history it keeps follows this config's retention.
            backend_config = dataclasses.replace(
                self.backend.config, result_expires=config.result_expires, history=config.history
            )
            self.backend = type(self.backend)(backend_config)
            self._own_backend = True
        multiplier = config.prefetch_multiplier
        if isinstance(multiplier, bool) or not isinstance(multiplier, int) or multiplier < 1:
            raise ImproperlyConfigured(
                f"worker_prefetch_multiplier must be a whole number of at least 1 on RabbitMQ, "
                f"not {multiplier!r} (potatoq has no unlimited prefetch)"
            )
        self._multiplier = multiplier
        self._slots = 1  # tasks this process runs at once (serve_slots)
        self._lock = threading.Lock()
        _BROKERS.add(self)
        self._state: _ProcessState | None = None
        self._fired: OrderedDict[tuple[str, float], None] = OrderedDict()
        self._not_revoked: OrderedDict[str, float] = OrderedDict()  # task id -> monotonic read time
        self._valid = CheckedNames()  # a worker's queue lists, each validated once
        # Chord parts (group id, index) whose join in this process hasn't finished
        # publishing the callback it may owe (a settle that failed and will be retried).
        self._unfinished_joins: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._leases = None  # the concurrency slots this process holds (.limits)

    @property
    def writes_results_at_settle(self) -> bool:
        """The worker hands results to settle() instead of writing them to the result
        backend itself: settle writes them only once the delivery is known to be current,
        so a late settle can't overwrite the result of a newer delivery."""
        return self.backend is not None

    @property
    def prefetch(self) -> int:
        """Unacked deliveries each consumer of this process may hold: the prefetch
        multiplier times the tasks the process runs at once (RabbitMQ's limit is 65,535)."""
        return min(65535, self._multiplier * self._slots)

    def serve_slots(self, slots: int) -> None:
        """This process runs ``slots`` tasks at once (a worker child's threads): its
        consumers hold up to ``worker_prefetch_multiplier x slots`` deliveries each."""
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"serve_slots needs a whole number of at least 1, not {slots!r}")
        self._slots = slots
        state = self._state
        if state is not None and state.pid == os.getpid():
            state.link.run(state.intake.set_prefetch_op, self.prefetch)

    # ------------------------------------------------------------------ plumbing

    def _parameters(self) -> list[pika.URLParameters]:
        """One set of connection parameters per node of ``broker_url`` (see :mod:`.nodes`)."""
        return [self._node_parameters(url) for url in self.nodes]

    def _node_parameters(self, url: str) -> pika.URLParameters:
        params = pika.URLParameters(url)
        params.connection_attempts = 1
        params.socket_timeout = self.config.connection_timeout
        params.stack_timeout = self.config.connection_timeout
        params.blocked_connection_timeout = None
        if self.options.heartbeat is not None:
            params.heartbeat = self.options.heartbeat
        params.client_properties = {
            "connection_name": f"potatoq {socket.gethostname()} pid {os.getpid()}",
            "product": "potatoq",
        }
        if params.ssl_options is not None and self.options.ssl:
            context = ssl.create_default_context(cafile=self.options.ssl.get("cafile"))
            if self.options.ssl.get("certfile"):
                context.load_cert_chain(self.options.ssl["certfile"], self.options.ssl.get("keyfile"))
            params.ssl_options = pika.SSLOptions(context, params.host)
        return params

    def _process(self) -> _ProcessState:
        state = self._state
        if state is not None and state.pid == os.getpid():
            return state
        with self._lock:
            state = self._state
            if state is not None and state.pid != os.getpid():
                _INHERITED.append(state)  # made by the parent: never touched here
                state = None
            if state is None:
                state = _ProcessState(self)
                self._state = state
        state.link.wait_ready()  # fails here, at start-up, on a server older than 4.0
        return state

    def _run(self, op: Any, *args: Any) -> Any:
        return self._process().link.run(op, *args)

    # ------------------------------------------------------------------ messages

    def enqueue(self, messages: Sequence[Message], *, connection: Any = None) -> None:
        if connection is not None:
            raise ImproperlyConfigured(
                "enqueue(connection=...) writes through a database transaction; RabbitMQ has none"
            )
        if not messages:
            return
        # Bounded, so that .delay() raises within about broker_connection_timeout during
        # an outage (a publish in flight as the server shuts down may otherwise wait for
        # confirms until the server closes the connection). A publish that timed out may
        # still be confirmed later: enqueue is at-least-once.
        deadline = time.monotonic() + self.config.connection_timeout + PER_MESSAGE * min(len(messages), BATCH)
        for message in messages:
            self._checked(message)
            if limits.HEADER in message.headers or limits.RATE_HEADER in message.headers:
                self._store()  # refused at send without a store for the slots and tokens
        messages = self._take_unique(messages)
        state = self._process()
        now = time.time()
        items = [state.session.outgoing(m, now) for m in messages]
        for start in range(0, len(items), BATCH):
            batch = items[start : start + BATCH]
            state.link.run(state.session.publish_all, batch, timeout=max(0.01, deadline - time.monotonic()))
            deadline = time.monotonic() + self.config.connection_timeout + PER_MESSAGE * len(batch)

    def _checked(self, message: Message) -> Message:
        validate_queue_name(message.queue, allow_dots=False)
        return message

    def claim(self, queues: Sequence[str], worker: WorkerRef) -> Delivery | None:
        self._valid(queues)
        state = self._process()
        while True:
            # A delivery pushed meanwhile (a busy worker's usual case) is taken without a
            # hop to the I/O thread.
            pending: Pending | None = state.intake.take_buffered(queues)
            if (
                pending is None
                and state.intake.consuming(queues)
                and state.session.declared.issuperset(queues)
            ):
                if not state.intake.holding():
                    return None  # a busy worker: the next task is pushed, wait() returns on it
                # Deliveries waiting for a rate token fill the prefetch: take one more.
                pending = state.link.run(state.intake.beside_held_op, list(queues))
                if pending is None:
                    return None
            if pending is None:
                pending = state.link.run(state.intake.claim_op, list(queues))
            if pending is None:
                return None
            delivery = self._delivery(state, pending, worker)
            if not self._skipped(state, delivery, pending):
                return delivery

    def _delivery(self, state: _ProcessState, pending: Pending, worker: WorkerRef) -> Delivery:
        task_id = getattr(pending.properties, "message_id", None)
        if not task_id:
            try:
                task_id = Message.decode(pending.body, max_size=self.config.max_message_size).id
            except MessageDecodeError:
                task_id = f"undecodable-{pending.generation}-{pending.tag}"
        return decode_delivery(
            id=task_id,
            queue=pending.queue,
            raw=pending.body,
            token=state.link.token(pending.tag),
            deliveries=pending.delivery_count + 1,
            worker=worker,
            handle=pending.tag,
            max_size=self.config.max_message_size,
        )

    def _skipped(self, state: _ProcessState, delivery: Delivery, pending: Pending) -> bool:
        """Deliveries that must not run: one past the delivery limit (possible only after a
        graceful requeue re-published it, see ``Intake.settle_op``), a copy of one whose
        process the supervisor killed, a revoked task, or a duplicate of a message sent
        ``once`` (a chord callback, a periodic fire) whose id already has a finished
        result. Each is settled here and the claim goes on."""
        limit = self.topology.max_deliveries
        if delivery.deliveries > limit:
            reason = f"WorkerLostError: delivered {delivery.deliveries - 1} times without finishing"
            self.settle(delivery, DeadLetter(reason, result=_worker_lost(delivery, reason)))
            return True
        once = _once(pending)
        if pending.redelivered:  # returned by RabbitMQ: maybe by a child the supervisor killed
            action: str | None = state.link.run(self._killed_op, delivery.id, delivery.deliveries - 1)
            if action == "requeue":  # killed at shutdown: back in the queue, uncounted
                state.link.run(state.intake.settle_op, delivery.token, [], "republish", 1)
                return True
            if action == "drop":  # killed at its hard time limit, dead-lettered already
                state.link.run(state.intake.settle_op, delivery.token, [], "ack")
                return True
        if self.backend is not None:
            record = self.backend.get_result(delivery.id)
            if record is not None and record.state == REVOKED:
                # a REVOKED result again (with the task's name), so its history record says so
                name = delivery.message.task if delivery.message is not None else None
                revoked = ResultRecord(task_id=delivery.id, state=REVOKED, name=name, date_done=time.time())
                self.settle(delivery, Complete(result=revoked))
                return True
            if record is not None and once and record.state in READY_STATES:
                self.settle(delivery, Complete())
                return True
            self._read_not_revoked(delivery.id)
        return self._held_back(state, delivery, pending)

    def _held_back(self, state: _ProcessState, delivery: Delivery, pending: Pending) -> bool:
        """Park ``delivery`` in the cascade if its concurrency slot or rate token isn't
        available (see :mod:`.limits`); else it runs (releasing a unique key held only
        while waiting)."""
        try:
            wait = self._limit_wait(delivery, pending)
        except ImproperlyConfigured as exc:  # sent by a producer with another result backend
            log.warning("task %s runs without its limit: %s", delivery.id, exc)
            wait = None
        if wait is None:
            self._unique_ends(delivery, None)
            return False
        seconds, token = wait
        if token is not None and seconds < 1.0:  # a rate token due within the cascade's step
            headers = dict(getattr(pending.properties, "headers", None) or {})
            pending.properties.headers = {**headers, H_RATE_TOKEN: token}  # its own, when back
            state.link.run(state.intake.hold_op, pending, seconds)
            return True
        # A rate token's wait is parked rounded down, the rest held here when it comes back
        # (never early); a concurrency slot's is SLOT_WAIT.
        whole = int(seconds) if token is not None else delay.whole_seconds(seconds)
        parked = self._parked(pending, whole, token)
        state.link.run(state.intake.settle_op, delivery.token, [parked], "ack")
        return True

    def _settled(self, delivery: Delivery, outcome: Outcome, applied: bool) -> None:
        """After a settle: its slot goes back whatever happened (a stale delivery was
        returned to its queue by RabbitMQ and takes a new slot when delivered again);
        the unique key only once the ack ending the task is done."""
        self._release_slot(delivery)
        if applied:
            self._unique_ends(delivery, outcome)
            self._history_settled(delivery, outcome)  # task history (issue 31)

    def revoke(self, task_id: str) -> bool:
        revoked = super().revoke(task_id)
        if revoked:
            self._unique_revoked(task_id)
        return revoked

    def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        state = self._process()
        prepared = self._prepare_settle(state, delivery, outcome)
        if prepared is None:
            self._release_slot(delivery)
            return False
        ok: bool = state.link.run(state.intake.settle_op, delivery.token, *prepared)
        self._settled(delivery, outcome, ok)
        return ok

    def settle_and_claim(
        self, delivery: Delivery, outcome: Outcome, queues: Sequence[str], worker: WorkerRef
    ) -> tuple[bool, Delivery | None]:
        """Settle, then the delivery RabbitMQ pushed meanwhile (see
        :meth:`.Intake.settle_claim_op`): no barrier round trip, and with nothing to
        publish no wait for the I/O thread at all. None when nothing was pushed yet; the
        worker's ``wait`` then returns on the push."""
        self._valid(queues)
        state = self._process()
        prepared = self._prepare_settle(state, delivery, outcome)
        if prepared is None:
            self._release_slot(delivery)
            return False, self.claim(queues, worker)
        publishes, action = prepared
        intake = state.intake
        pending: Pending | None
        if (
            not publishes
            and action == "ack"
            and not intake.draining
            and state.session.declared.issuperset(queues)
            and state.link.post(intake.ack_resume, delivery.token, list(queues))
        ):
            # Nothing to confirm: the ack goes to the I/O thread without waiting for it,
            # and the next delivery is taken here (or pushed, once RabbitMQ has the ack).
            applied, pending = True, intake.take_buffered(queues)
        else:
            applied, pending = state.link.run(
                intake.settle_claim_op, delivery.token, publishes, action, list(queues)
            )
        self._settled(delivery, outcome, applied)
        if pending is None:
            return applied, None
        following = self._delivery(state, pending, worker)
        if self._skipped(state, following, pending):
            return applied, self.claim(queues, worker)
        return applied, following

    def _prepare_settle(
        self, state: _ProcessState, delivery: Delivery, outcome: Outcome
    ) -> tuple[list[Outgoing], str] | None:
        """Write ``outcome``'s result (and chord join), and return the publishes and the
        action that settle it on RabbitMQ; None if the delivery is stale. The staleness check
        comes first, so a late settle of a delivery handed to another worker meanwhile
        writes no result over the new delivery's."""
        token = delivery.token
        fence = _fence(state, delivery)
        if fence is None:
            return None
        current = state.intake.is_current_now(token)
        if current is None:  # a round trip decides (after a stall or a long hold)
            current = state.link.run(state.intake.is_current_op, token)
        if not current:
            return None
        # The delivery may still be lost between that check and the result write (the
        # process is paused, its connection times out, another worker runs the task): the
        # write is conditional on this claim's fence, so it never replaces the result of
        # the claim that came after (see brokers.records, fenced writes).
        session = state.session
        now = time.time()
        publishes: list[Outgoing] = []
        action = "ack"
        if isinstance(outcome, Requeue):
            action = "requeue" if outcome.crashed else "republish"
        elif isinstance(outcome, RetryLater):
            if not self._write_result(outcome.result, fence):
                return None
            publishes.append(session.outgoing(self._checked(outcome.message), now))
        elif isinstance(outcome, Complete | DeadLetter):
            if not self._write_result(outcome.result, fence):
                return None
            if outcome.chord is not None:
                self._join_chord(outcome.chord, redelivered=delivery.deliveries > 1)
            publishes.extend(session.outgoing(self._checked(m), now) for m in outcome.followups)
            if isinstance(outcome, DeadLetter):
                publishes.append(self._dead_letter_publish(delivery, outcome.reason, now))
        else:  # pragma: no cover - the Outcome union is closed
            raise TypeError(f"unknown outcome {outcome!r}")
        return publishes, action

    def _dead_letter_publish(self, delivery: Delivery, reason: str, now: float) -> Outgoing:
        headers: dict[str, object] = {
            H_REASON: reason[:4000],
            H_DIED_AT: f"{now:.6f}",  # AMQP tables have no portable float
            H_QUEUE: delivery.queue,
            H_DELIVERIES: delivery.deliveries,
        }
        publish = Publish(
            "",
            self.topology.dead_queue(delivery.queue),
            delivery.raw,
            properties_for(delivery.id, headers),
        )
        return Outgoing(publish, delivery.queue, delayed=False)

    def _write_result(self, record: ResultRecord | None, fence: int) -> bool:
        """Write ``record`` unless a later claim's result is stored: False if refused."""
        if record is None or self.backend is None:
            return True
        return self.backend.store_result_fenced(record, fence)

    def _join_chord(self, join: ChordJoin, *, redelivered: bool) -> None:
        # The completing join publishes the callback at once, stale delivery or not.
        # The backend records the join (and the chord as fired) before that publish, so
        # a crash or a failed publish in between would lose the callback: a part joining
        # again (redelivered, or a settle retried in this process after a failed attempt)
        # that finds the chord complete publishes it again. Callbacks go out ``once``
        # under their own id, so a second copy is dropped at claim once the first has
        # finished.
        backend = self._backend("a chord")
        validate_queue_name(join.callback.queue, allow_dots=False)
        part = (join.group_id, join.index)
        with self._lock:
            again = redelivered or part in self._unfinished_joins
            self._unfinished_joins[part] = None
            while len(self._unfinished_joins) > FIRED_KEEP:
                self._unfinished_joins.popitem(last=False)
        done = backend.chord_join(join, enqueue_callback=False)
        if done or (again and len(backend.chord_parts(join.group_id)) >= join.size):
            self._publish_once(join.callback)
        with self._lock:
            self._unfinished_joins.pop(part, None)

    def _publish_once(self, message: Message) -> None:
        state = self._process()
        item = state.session.outgoing(self._checked(message), time.time(), once=True)
        state.link.run(state.session.publish_all, [item], timeout=self.config.connection_timeout + 1.0)

    def wait(self, queues: Sequence[str], timeout: float) -> None:
        self._valid(queues)
        timeout = self._history_idle(timeout)  # held history records (issue 31)
        self._process().intake.wait(queues, timeout)

    def interrupt(self) -> None:
        state = self._state
        if state is not None and state.pid == os.getpid():
            state.intake.interrupt()

    def _process_state_unchecked(self) -> _ProcessState:
        state = self._state
        assert state is not None
        return state

    # ------------------------------------------------------------------ scheduler

    def _leads_scheduler(self) -> bool:
        state = self._state
        return state is not None and state.pid == os.getpid() and state.lease.holding

    def queued_task(self, task_id: str) -> QueuedTask | None:
        # A quorum queue can't be searched or peeked at by message id (capabilities.finds_queued).
        return None

    def scheduler_lease(self) -> bool:
        """True while this process holds the periodic-scheduler token.

        The first call starts competing for it (a consumer on the single-active-consumer
        queue); call it before each scheduler tick. It turns True within milliseconds of
        the previous holder's connection closing.
        """
        lease = self._process().lease
        lease.request()
        return lease.holding

    def release_scheduler_lease(self) -> None:
        """Stop competing for the token, handing it on if held (clean shutdown)."""
        state = self._state
        if state is not None and state.pid == os.getpid():
            state.lease.release()

    # ------------------------------------------------------------------ lifecycle

    def migrate(self) -> None:
        state = self._process()
        state.link.run(declare.ensure_cascade, state.link, self.config.url)

    def ping(self) -> None:
        self._process()

    def close(self) -> None:
        with contextlib.suppress(Exception):  # best effort: held history records (issue 31)
            self.flush_history()
        with self._lock:
            state, self._state = self._state, None
        if state is None:
            return
        if state.pid != os.getpid():
            _INHERITED.append(state)
            return
        state.link.close()
        self._stop_leases()
        if self._own_backend and self.backend is not None:
            self.backend.close()


def _fence(state: _ProcessState, delivery: Delivery) -> int | None:
    """The fence of ``delivery``'s result: its claim time in ms (None: not this process's
    current delivery any more)."""
    pending = state.intake.owned(delivery.token)
    return None if pending is None else int(pending.claimed_at * 1000)


def _once(pending: Pending) -> bool:
    headers = getattr(pending.properties, "headers", None) or {}
    return bool(headers.get(H_ONCE))


def _worker_lost(delivery: Delivery, reason: str) -> ResultRecord:
    """The FAILURE result of a task dead-lettered for too many deliveries."""
    return ResultRecord(
        task_id=delivery.id,
        state=FAILURE,
        result={
            "exc_type": "WorkerLostError",
            "exc_module": "potatoq.exceptions",
            "exc_message": [reason],
        },
        name=delivery.message.task if delivery.message else None,
        date_done=time.time(),
    )
