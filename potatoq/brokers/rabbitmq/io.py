"""The RabbitMQ broker's AMQP link: one connection per process, driven by one thread at a time.

pika is not thread-safe, so only the thread holding the *baton* (see :mod:`.baton`) touches
the connection or a channel: the thread that waits on the connection when nobody else
does, else the link's I/O thread. Threads hand the link *operations*: generator functions
that run with the baton and ``yield`` an :class:`Await` whenever they need a reply from the
server (a declare-ok, a batch of publisher confirms, a basic.get). The driver resumes the
generator with the reply, or throws :class:`ChannelLost` into it when the channel it waits
on closes. :meth:`AmqpLink.run` queues an operation for the driver and blocks the caller
until it finishes, so each broker method reads as straight-line code. "The I/O thread"
below means whichever thread holds the baton.

Because the I/O thread takes the baton whenever nobody has held it for a few
milliseconds, heartbeats keep flowing while a task runs in another thread of the process.

Channels, opened on every (re)connect:

* ``work``: consumers and basic.get with the process's prefetch (1 by default), acks and
  nacks. Its *generation* changes whenever it is replaced (reconnect, or the server closed
  it, e.g. on a consumer timeout); deliveries from an older generation can't be acked any
  more and are refused.
* ``pub``: publisher confirms on, every publish ``mandatory``. Returned (unroutable)
  messages and nacks are reported per message to the operation that published them.
* ``admin``: declares, deletes, purges, passive declares.

Operations that may provoke a channel error on purpose (a passive declare of a queue
that may not exist) open a short-lived channel of their own, so the error can't take the
work channel and its unacked deliveries down with it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pika
import pika.channel
import pika.spec

from potatoq.exceptions import ImproperlyConfigured, OperationalError

from .baton import Baton, DeadlineIOLoop
from .eager import send_eagerly
from .ops import ChannelLost, Op, T, _ConfirmBatch
from .steps import LinkSteps

log = logging.getLogger("potatoq.brokers.rabbitmq")


#: The oldest RabbitMQ this broker runs on (quorum-queue delivery limits, at-least-once
#: dead-lettering and the 4.0 delivery-count semantics it relies on).
MIN_SERVER_VERSION = (4, 0)

#: How often the I/O thread notes that it runs, and the gap between two notes that counts
#: as a stall (the process was stopped, or starved): after a stall, a settle first checks
#: that the connection survived (see :meth:`AmqpLink.verify`).
TICK = 0.25
STALL = 1.0


def server_version(properties: dict[str, Any] | None) -> tuple[int, ...]:
    """The server's version from its connection.start properties, e.g. ``(4, 0, 5)``."""
    raw = (properties or {}).get("version", b"")
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    parts: list[int] = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def version_text(properties: dict[str, Any] | None) -> str:
    raw = (properties or {}).get("version", b"?")
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class AmqpLink(LinkSteps, Baton):
    """One process's AMQP connection and the thread that owns it.

    ``on_connected(link)`` runs on the I/O thread after every (re)connect, once the three
    channels are open (the broker restarts its consumers there). ``describe`` is the
    masked URL used in error messages.

    ``parameters`` may list several nodes (a cluster, see :mod:`.nodes`): the link connects
    to them in turn, starting with the first; when an attempt fails or the connection is
    lost it tries the next node at once, and backs off only once every node has failed in
    a row (callers waiting for the connection are told then, not after the first node).
    """

    def __init__(
        self,
        parameters: pika.connection.Parameters | Sequence[pika.connection.Parameters],
        *,
        describe: str,
        connect_timeout: float,
        on_connected: Callable[[AmqpLink], None] | None = None,
        on_work_channel_lost: Callable[[AmqpLink], None] | None = None,
        prefetch: int = 1,
    ) -> None:
        nodes = [parameters] if isinstance(parameters, pika.connection.Parameters) else list(parameters)
        if not nodes:
            raise ImproperlyConfigured("no RabbitMQ node to connect to")
        self.nodes = nodes
        self.node = 0  # index in nodes of the current (or next) connection attempt
        self._failed_in_row = 0  # attempts and losses since the last successful open
        #: The work channel's per-consumer prefetch (worker_prefetch_multiplier x the
        #: process's task slots), set on every new work channel.
        self.prefetch = prefetch
        self.describe = describe
        self.connect_timeout = connect_timeout
        self.on_connected = on_connected
        self.on_work_channel_lost = on_work_channel_lost
        #: Called on the I/O thread at every tick (TICK seconds) while connected.
        self.on_tick: Callable[[], None] | None = None
        self.pid = os.getpid()
        #: Distinguishes this link's delivery tokens from any other process's.
        self.nonce = f"{random.getrandbits(40):010x}"
        self.generation = 0  # of the work channel: bumped each time it is replaced
        self.connection: pika.SelectConnection | None = None
        self.work: pika.channel.Channel | None = None
        self.pub: pika.channel.Channel | None = None
        self.admin: pika.channel.Channel | None = None
        self.server_properties: dict[str, Any] = {}
        self._ioloop = DeadlineIOLoop()
        self._init_baton()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._ready = threading.Event()
        # Connection attempts that failed so far, and a condition notified when one fails or
        # the link becomes ready (callers waiting for the connection watch both).
        self._attempts_failed = 0
        self._attempt_cond = threading.Condition()
        self._fatal: BaseException | None = None  # e.g. server too old: never retried
        self._last_error: BaseException | None = None
        self._closing = False
        self._backoff = 0.2
        self._retry_timer: object | None = None  # the pending reconnect attempt, if any
        self._queued: deque[Callable[[], None]] = deque()  # ops submitted before ready
        self._waiters: dict[int, set[Callable[..., None]]] = {}  # id(channel) or 0 -> resumes
        self._confirm_seq = 0
        self._confirms: dict[int, _ConfirmBatch] = {}
        self._get_queue: deque[tuple[str, Callable[..., None]]] = deque()
        self._get_current: Callable[..., None] | None = None
        # Channels for ready counts, one per queue probed at once (pika runs one RPC at a
        # time per channel; several channels answer in one round trip).
        self._probes: list[pika.channel.Channel | None] = []
        # Per probe channel, the callbacks of its passive declares in the order sent (pika
        # sends one RPC at a time per channel, so replies come back in that order).
        self._probe_pending: dict[int, deque[Callable[[int | None], None]]] = {}
        self._probes_opening: set[int] = set()
        # I/O thread: when it last ran its tick, and when it last resumed after a stall.
        self._last_tick = time.monotonic()
        self.stalled_at = 0.0

    # ------------------------------------------------------------------ caller side

    def run(self, op: Callable[..., Op[T]], *args: Any, timeout: float | None = None) -> T:
        """Run ``op(*args)`` with the baton; block until it returns (or raise its error)."""
        if threading.current_thread() is self._thread or self.driving_here():
            raise RuntimeError("AmqpLink.run called from the I/O thread itself")
        self._start()
        started = time.monotonic()
        # While the connection is down (or being re-established), fail within
        # connect_timeout: callers retry (an enqueue until broker_connection_timeout, a
        # worker with backoff), and must not sit behind a reconnect for much longer.
        ready_within = self.connect_timeout if timeout is None else min(self.connect_timeout, timeout)
        if not self._await_ready(ready_within) and self._fatal is None:
            raise self._unreachable()
        if self._fatal is not None:
            raise self._fatal
        future: Future[T] = Future()

        def submit() -> None:
            if self._fatal is not None:
                future.set_exception(self._fatal)
            elif self._ready.is_set():
                self._drive(op(*args), future)
            else:  # lost between the check above and now
                future.set_exception(self._unreachable())

        self.queue(submit)
        if timeout is None:
            wait = max(30.0, self.connect_timeout * 4)
        else:
            wait = max(0.01, timeout - (time.monotonic() - started))
        try:
            return future.result(wait)
        except FutureTimeout:
            if not self._ready.is_set():
                raise self._unreachable() from None
            raise OperationalError(f"RabbitMQ at {self.describe} didn't answer within {wait:.0f} s") from None

    def wait_ready(self) -> None:
        """Connect now (if not yet) and raise the reason if the server can't be used."""
        self._start()
        if not self._await_ready(self.connect_timeout):
            if self._fatal is not None:
                raise self._fatal
            raise self._unreachable()
        if self._fatal is not None:
            raise self._fatal

    def _await_ready(self, within: float) -> bool:
        """Wait up to ``within`` seconds for the connection. While it is down, a connection
        attempt is made now (not after the reconnect backoff) and the wait ends as soon as
        that attempt fails: a refused connection is reported at once, so a caller's own
        retries (``.delay()`` until broker_connection_timeout) stay within its bound."""
        if self._ready.is_set():
            return True
        with self._attempt_cond:
            failed = self._attempts_failed
        self.queue(self._retry_now)
        with self._attempt_cond:
            self._attempt_cond.wait_for(
                lambda: self._ready.is_set() or self._fatal is not None or self._attempts_failed > failed,
                within,
            )
        return self._ready.is_set()

    def _set_ready(self) -> None:
        self._ready.set()
        with self._attempt_cond:
            self._attempt_cond.notify_all()

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` with the baton without waiting (fire and forget)."""
        self._start()
        self.queue(fn)

    def post(self, fn: Callable[..., None], *args: Any) -> bool:
        """Run ``fn(*args)`` with the baton without waiting (errors are logged), for a step
        that needs no reply (an ack): a plain function, without the generator, future and
        driver of an operation; on the calling thread, its bytes sent before this returns,
        unless another thread drives. Call it outside any task (see :mod:`.baton`). False,
        running nothing, while the connection is down."""
        if self._thread is None or self._fatal is not None or not self._ready.is_set():
            return False

        def call() -> None:
            if self._fatal is None and self._ready.is_set():
                try:
                    fn(*args)
                except Exception:  # must not stop the I/O thread
                    log.exception("background AMQP call failed")

        self.submit_here(call)
        return True

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set() and self._fatal is None

    def close(self) -> None:
        """Close the connection and stop the thread (unacked deliveries are requeued)."""
        if self._thread is None or not self._thread.is_alive():
            return

        def stop() -> None:
            self._closing = True
            conn = self.connection
            if conn is not None and conn.is_open:
                if self.before_wait is not None:
                    self.before_wait()  # acks waiting to go together go now
                conn.close()
            else:
                self._stop_driving()

        self.queue(stop)
        self._thread.join(10)

    def _unreachable(self) -> OperationalError:
        reason = f": {self._last_error}" if self._last_error else ""
        return OperationalError(
            f"RabbitMQ at {self.describe} is not reachable within {self.connect_timeout:g} s{reason}"
        )

    # ------------------------------------------------------------------ I/O thread

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._main, name="potatoq-amqp-io", daemon=True)
            self._thread.start()

    def _main(self) -> None:
        with self.cond:  # nobody else drives before the first connection is made
            self._driver = threading.get_ident()
        try:
            self._ioloop.activate_poller()  # what IOLoop.start() does before its loop
            self._watch_wake()
            self._connect()
            self._ioloop.call_later(TICK, self._tick)
            self._drive_in_background()
        finally:
            with contextlib.suppress(Exception):
                self._ioloop.close()
            self._close_baton()

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._last_tick > STALL:
            self.stalled_at = now
        self._last_tick = now
        self._ioloop.call_later(TICK, self._tick)
        if self.on_tick is not None and self._ready.is_set() and not self._closing:
            try:
                self.on_tick()
            except Exception:  # must not stop the tick (or the I/O thread)
                log.exception("the RabbitMQ tick callback failed")

    def stalled_since(self, moment: float) -> bool:
        """I/O thread: whether this thread may have stalled after ``moment`` (monotonic),
        long enough for the server to miss heartbeats: a stall seen by the tick, or one
        going on right now (the tick hasn't run yet since the process was resumed)."""
        now = time.monotonic()
        return self.stalled_at > moment or now - self._last_tick > STALL

    @property
    def heartbeat(self) -> float:
        """The connection's negotiated heartbeat timeout in seconds (0: none)."""
        conn = self.connection
        params = getattr(conn, "params", None) if conn is not None else None
        value = getattr(params, "heartbeat", None)
        return float(value) if isinstance(value, int | float) else 60.0

    def _connect(self) -> None:
        self._ready.clear()
        self.connection = pika.SelectConnection(
            self.nodes[self.node],
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed,
            custom_ioloop=self._ioloop,
        )

    def _on_open(self, connection: pika.SelectConnection) -> None:
        self.server_properties = dict(connection.server_properties or {})
        version = server_version(self.server_properties)
        if version < MIN_SERVER_VERSION:
            self._fatal = ImproperlyConfigured(
                f"RabbitMQ {version_text(self.server_properties)} at {self.describe} is too old: "
                f"potatoq needs RabbitMQ {'.'.join(map(str, MIN_SERVER_VERSION))} or newer "
                "(it relies on RabbitMQ 4's quorum-queue consumer timeouts, delivery counts "
                "and dead-lettering)"
            )
            self._fail_queued()
            self._set_ready()
            self._closing = True
            connection.close()
            return
        self._backoff = 0.2
        self._failed_in_row = 0
        send_eagerly(connection)
        opened: dict[str, pika.channel.Channel] = {}

        def one_open(role: str) -> Callable[[pika.channel.Channel], None]:
            def on_channel(channel: pika.channel.Channel) -> None:
                opened[role] = channel
                if len(opened) == 3:
                    self._channels_ready(opened)

            return on_channel

        for role in ("work", "pub", "admin"):
            connection.channel(on_open_callback=one_open(role))

    def _channels_ready(self, opened: dict[str, pika.channel.Channel]) -> None:
        self._install_work(opened["work"])
        self._install_pub(opened["pub"])
        self._install_admin(opened["admin"])
        # The work channel's qos and the pub channel's confirm mode are set before any
        # operation runs: both are RPCs that complete before anything queued behind them.
        assert self.work is not None and self.pub is not None
        self.work.basic_qos(prefetch_count=self.prefetch)
        self.pub.confirm_delivery(self._on_confirm)
        self._set_ready()
        if self.on_connected is not None:
            try:
                self.on_connected(self)
            except Exception:  # a consumer restart failure mustn't kill the I/O thread
                log.exception("restarting consumers after connecting to %s failed", self.describe)
        queued, self._queued = self._queued, deque()
        for submit in queued:
            submit()

    def _install_work(self, channel: pika.channel.Channel) -> None:
        self.generation += 1
        self.work = channel
        self._get_queue.clear()
        self._get_current = None
        channel.add_on_close_callback(self._on_work_closed)
        channel.add_callback(self._on_get_empty, [pika.spec.Basic.GetEmpty], one_shot=False)

    def _install_pub(self, channel: pika.channel.Channel) -> None:
        self.pub = channel
        self._confirm_seq = 0
        channel.add_on_close_callback(self._on_pub_closed)
        channel.add_on_return_callback(self._on_return)

    def _install_admin(self, channel: pika.channel.Channel) -> None:
        self.admin = channel
        channel.add_on_close_callback(self._on_admin_closed)

    def _on_open_error(self, _connection: pika.SelectConnection, error: BaseException) -> None:
        self._last_error = error
        if self._next_node():  # every node failed in a row: callers waiting are told
            with self._attempt_cond:
                self._attempts_failed += 1
                self._attempt_cond.notify_all()
        self._schedule_reconnect()

    def _next_node(self) -> bool:
        """I/O thread: the next attempt goes to the next node; True once all failed in a row."""
        self._failed_in_row += 1
        if len(self.nodes) > 1:
            node = self.nodes[self.node]
            self.node = (self.node + 1) % len(self.nodes)
            following = self.nodes[self.node]
            log.warning(
                "RabbitMQ node %s:%s failed; trying node %s:%s",
                getattr(node, "host", "?"), getattr(node, "port", "?"),
                getattr(following, "host", "?"), getattr(following, "port", "?"),
            )  # fmt: skip
        return self._failed_in_row >= len(self.nodes)

    def _on_closed(self, _connection: pika.SelectConnection, reason: BaseException) -> None:
        self._ready.clear()
        self._probes_opening.clear()
        self.work = self.pub = self.admin = None
        self._fail_waiters(0, ChannelLost(f"connection to {self.describe} closed: {reason}"))
        if self._closing:
            self._fail_queued()
            self._stop_driving()
            return
        self._last_error = reason
        log.warning("connection to RabbitMQ at %s lost (%s); reconnecting", self.describe, reason)
        self._next_node()
        self._schedule_reconnect()

    def _schedule_reconnect(self) -> None:
        if self._closing:
            self._stop_driving()
            return
        if len(self.nodes) > 1 and self._failed_in_row % len(self.nodes) != 0:
            self._retry_timer = self._ioloop.call_later(0, self._retry)  # next node: now
            return
        delay, self._backoff = self._backoff, min(self._backoff * 2, 5.0)
        self._retry_timer = self._ioloop.call_later(delay, self._retry)

    def _retry(self) -> None:
        self._retry_timer = None
        self._connect()

    def _retry_now(self) -> None:
        """I/O thread: a caller is waiting for the connection, so the next attempt is made
        now instead of after the backoff (a server back after a 5 s outage is then used at
        once, not up to 5 s later). Attempts already under way are left alone."""
        timer, self._retry_timer = self._retry_timer, None
        if timer is not None and not self._closing:
            self._ioloop.remove_timeout(timer)
            self._connect()

    def _fail_queued(self) -> None:
        if self._fatal is None:
            self._fatal = OperationalError(f"the connection to {self.describe} was closed")
        queued, self._queued = self._queued, deque()
        for submit in queued:
            submit()  # with _fatal set they fail their futures

    # -- channel loss

    def _on_work_closed(self, channel: pika.channel.Channel, reason: BaseException) -> None:
        self._channel_closed(channel, reason)
        if channel is not self.work:
            return
        self.work = None
        if self.on_work_channel_lost is not None:
            self.on_work_channel_lost(self)
        if self.connection is not None and self.connection.is_open and not self._closing:
            log.warning("RabbitMQ closed the work channel (%s); opening a new one", reason)

            def reopened(new: pika.channel.Channel) -> None:
                self._install_work(new)
                new.basic_qos(prefetch_count=self.prefetch)
                if self.on_connected is not None:
                    self.on_connected(self)

            self.connection.channel(on_open_callback=reopened)

    def _on_pub_closed(self, channel: pika.channel.Channel, reason: BaseException) -> None:
        self._channel_closed(channel, reason)
        if channel is not self.pub:
            return
        self.pub = None
        self._confirms.clear()
        if self.connection is not None and self.connection.is_open and not self._closing:

            def reopened(new: pika.channel.Channel) -> None:
                self._install_pub(new)
                new.confirm_delivery(self._on_confirm)

            self.connection.channel(on_open_callback=reopened)

    def _on_admin_closed(self, channel: pika.channel.Channel, reason: BaseException) -> None:
        self._channel_closed(channel, reason)
        if channel is not self.admin:
            return
        self.admin = None
        if self.connection is not None and self.connection.is_open and not self._closing:
            self.connection.channel(on_open_callback=self._install_admin)

    def _channel_closed(self, channel: pika.channel.Channel, reason: BaseException) -> None:
        code = getattr(reason, "reply_code", 0)
        text = getattr(reason, "reply_text", str(reason))
        self._fail_waiters(id(channel), ChannelLost(f"{text}", code))

    def _fail_waiters(self, key: int, error: ChannelLost) -> None:
        keys = list(self._waiters) if key == 0 else [key]
        for k in keys:
            for resume in list(self._waiters.pop(k, ())):
                resume(error=error)

    # ------------------------------------------------------------------ the driver

    def _drive(
        self, gen: Op[T], future: Future[T], value: Any = None, error: BaseException | None = None
    ) -> None:
        try:
            request = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            if not future.done():
                future.set_result(stop.value)
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            if not future.done():
                future.set_exception(exc)
            return
        key = id(request.channel) if request.channel is not None else 0
        done = False

        def resume(result: Any = None, error: BaseException | None = None) -> None:
            nonlocal done
            if done:
                return
            done = True
            waiting = self._waiters.get(key)
            if waiting is not None:
                waiting.discard(resume)
            self._drive(gen, future, result, error)

        if request.channel is not None and not request.channel.is_open:
            resume(error=ChannelLost("channel is closed"))
            return
        self._waiters.setdefault(key, set()).add(resume)
        try:
            request.start(resume)
        except Exception as exc:  # noqa: BLE001 - e.g. the channel closed under us
            resume(error=exc)

    def spawn(self, op: Op[Any]) -> None:
        """Start ``op`` on the I/O thread (call from the I/O thread); errors are logged."""
        future: Future[Any] = Future()
        future.add_done_callback(_log_failure)
        self._drive(op, future)


def _log_failure(future: Future[Any]) -> None:
    exc = future.exception()
    if exc is not None and not isinstance(exc, ChannelLost):
        log.warning("background AMQP operation failed: %s", exc)


def monotonic_deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout
