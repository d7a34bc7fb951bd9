"""Wake-ups for the PostgreSQL broker: channel names, the LISTEN side and the NOTIFY debouncer.

* Channels are ``potatoq:<queue>`` (``potatoq:<schema>:<queue>`` when a schema option is
  set, so apps in different schemas of one database don't wake each other). A name longer
  than PostgreSQL's 63-byte identifier limit becomes ``potatoq:<md5 of the full name>``;
  the SQL side builds the same name (see ``job_promote``). LISTEN quotes it as an
  identifier; pg_notify takes it as a bound value.
* :class:`Listener`: one dedicated connection per process holds the LISTENs, read by a
  thread of its own so notifications never pile up while the process is busy. Waiting
  threads block on a condition and all return together on any notification.
* A NOTIFY's payload is '' for ready work and :data:`DUE_PAYLOAD` for a task that falls
  due soon: the listener then calls ``on_due``, which makes the waiters' next promotion
  (which learns the earliest due time) happen at once.
* :class:`NotifyDebouncer`: NOTIFY takes a cluster-wide lock at commit, so a producer
  debounces it per queue with a token bucket: ``burst`` (5) inline NOTIFYs within a window
  (50 ms), then one per ``window / burst``. A trickle is announced by each enqueue's own
  statement; enqueues beyond the bucket are *held*, and after they commit a timer thread
  sends one trailing NOTIFY as soon as a token is back. So a ready task waits at most
  ``window / burst`` for its wake-up, never for the 1 s fallback poll.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any, Generic, TypeVar

import psycopg

from ...exceptions import OperationalError

log = logging.getLogger("potatoq.brokers.postgres")

CHANNEL_MAX = 63
# The payload of a NOTIFY announcing a task that falls due soon (a ready task's is ''):
# listeners then promote at once, which tells them when it is due (see PromotionClock).
DUE_PAYLOAD = "due"
T = TypeVar("T")

# Values made by a parent process, kept referenced forever in a forked child so garbage
# collection never runs their finalizers there (a psycopg connection's would send a
# Terminate message down the socket the parent still uses).
_PARKED: list[object] = []


def channel_prefix(schema_option: str | None) -> str:
    return "potatoq:" if schema_option is None else f"potatoq:{schema_option}:"


def channel_name(prefix: str, queue: str) -> str:
    """The NOTIFY channel of ``queue``; hashed when too long for an identifier."""
    full = prefix + queue
    if len(full.encode()) <= CHANNEL_MAX:
        return full
    import hashlib  # only for names this long: hashlib costs every worker process 0.6 MB

    return "potatoq:" + hashlib.md5(full.encode(), usedforsecurity=False).hexdigest()


class PerProcess(Generic[T]):
    """One value per process, made on first use; a forked child makes its own.

    (``base.ProcessLocal`` is per process *and* thread; the listener and the debouncer are
    shared by the threads of a process.)
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._value: T | None = None

    def get(self) -> T:
        with self._lock:
            if self._pid != os.getpid():
                if self._value is not None:
                    _PARKED.append(self._value)
                self._value, self._pid = None, os.getpid()
            if self._value is None:
                self._value = self._factory()
            return self._value

    def peek(self) -> T | None:
        """This process's value if it was made, without making one."""
        with self._lock:
            return self._value if self._pid == os.getpid() else None

    def pop(self) -> T | None:
        """This process's value, forgotten here (the caller closes it); None if none was made."""
        with self._lock:
            if self._pid != os.getpid():
                return None
            value, self._value = self._value, None
            return value


class Listener:
    """The LISTEN connection of one process, read by its own thread, shared by all waiters.

    The reader thread drains the socket as notifications arrive, even while every other
    thread is busy running tasks: a LISTENing backend whose client stops reading can't
    advance in the server's notification queue, which then grows for the whole cluster.
    Each notification bumps a generation counter; :meth:`wait` returns when it moved past
    what the calling thread saw when its previous wait returned, so a NOTIFY that arrives
    while the caller is claiming still ends its next wait at once.
    """

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        listen_query: Callable[[str], bytes],
        confirm_timeout: float = 10.0,
        on_due: Callable[[], None] | None = None,
    ) -> None:
        self._connect = connect
        self._listen_query = listen_query
        self._on_due = on_due  # called (on the reader thread) for each DUE_PAYLOAD notification
        self._confirm_timeout = confirm_timeout
        self._cond = threading.Condition()
        self._generation = 0  # bumped by notifications, reconnects and interrupts
        self._seen = threading.local()  # per thread: the generation its last wait returned at
        self._wanted: set[str] = set()
        self._listening: set[str] = set()  # LISTENed on the current connection
        self._thread: threading.Thread | None = None
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.notifications = 0  # received so far (for tests and stats)

    def wait(self, channels: Collection[str], timeout: float) -> None:
        """Return on a notification, an interrupt or ``timeout``; at once if one came since
        this thread's last wait. The first wait on a new channel returns as soon as its
        LISTEN is in place: a NOTIFY sent before it was missed, so the caller looks again
        (and, through ``on_due``, promotes again to learn the next due time)."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            if self._closed:
                return
            self._start()
            if not self._listening.issuperset(channels):
                self._wanted.update(channels)
                self._poke()
                self._cond.wait_for(
                    lambda: self._closed or self._listening.issuperset(channels), self._confirm_timeout
                )
                self._missed_due()
            else:
                seen = getattr(self._seen, "generation", None)
                if seen == self._generation:
                    self._cond.wait_for(
                        lambda: self._closed or self._generation != seen,
                        max(0.0, deadline - time.monotonic()),
                    )
            self._seen.generation = self._generation

    def _missed_due(self) -> None:
        """Not listening until now: a 'due' announcement may have been missed, so act as if
        one came (one promotion, which learns the next due time)."""
        if self._on_due is not None:
            self._on_due()

    def interrupt(self) -> None:
        """Wake every thread blocked in :meth:`wait` (and each thread's next call returns at once)."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="potatoq-pg-listen", daemon=True)
            self._thread.start()

    def _bump(self, received: int = 0) -> None:
        with self._cond:
            self.notifications += received
            self._generation += 1
            self._cond.notify_all()

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        failing_since: float | None = None
        while True:
            with self._cond:
                if self._closed:
                    break
                new = self._wanted - self._listening
            try:
                if conn is None or conn.closed:
                    conn = self._connect()
                    if failing_since is not None:
                        log.info("LISTEN connection restored after %.1fs", time.monotonic() - failing_since)
                        failing_since = None
                    with self._cond:
                        self._listening = set()
                        new = set(self._wanted)
                    self._missed_due()
                    self._bump()  # notifications may have been lost meanwhile: look again
                for channel in sorted(new):
                    conn.execute(self._listen_query(channel))
                if new:
                    with self._cond:
                        self._listening |= new
                        self._cond.notify_all()
                received = 0
                for notification in conn.notifies(timeout=0):
                    received += 1
                    if notification.payload == DUE_PAYLOAD and self._on_due is not None:
                        self._on_due()
                if received:
                    self._bump(received)
                ready, _, _ = select.select([conn.fileno(), self._wake_r], [], [])
                if self._wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
            except (psycopg.Error, OperationalError, OSError, ValueError) as exc:
                # OperationalError: the broker's connect() wraps psycopg's errors in it
                with self._cond:
                    closed = self._closed
                if closed:
                    break
                if failing_since is None:  # once per outage; a retry each second after that
                    failing_since = time.monotonic()
                    log.warning("LISTEN connection failed (%s); reconnecting every second", exc)
                else:
                    log.debug("LISTEN connection still failing (%s)", exc)
                _close_quietly(conn)
                conn = None
                with self._cond:
                    self._listening = set()
                self._bump()
                self._pause(1.0)  # don't spin while the server is away
        _close_quietly(conn)

    def _pause(self, seconds: float) -> None:
        with contextlib.suppress(OSError, ValueError):
            select.select([self._wake_r], [], [], seconds)

    def _poke(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        with self._cond:
            self._closed = True
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        self._poke()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _close_quietly(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()


class NotifyDebouncer:
    """A token bucket per channel: ``burst`` NOTIFYs at once, then one per ``window / burst``.

    A trickle of enqueues (fewer than ``burst`` per ``window``) is announced inline, each
    in its own statement, so an idle worker starts it at once. Only a burst beyond that is
    coalesced: its enqueues are *held*, and once they have committed a timer thread sends
    one trailing NOTIFY per channel as soon as the bucket has a token again (at most
    ``window / burst`` later). So a ready task never waits for the 1 s fallback poll, and a
    process sends at most ``burst + t * burst / window`` NOTIFYs per channel in any ``t``
    seconds (NOTIFY takes a cluster-wide lock at commit).

    Use: ``inline, held = admit(channels)``; put ``inline`` in the enqueue statement; once it
    has committed, ``defer(held)``. Deferring only after the commit matters: a trailing
    NOTIFY that overtook the commit would wake a waiter that finds nothing and then sleeps.
    While a channel has a trailing NOTIFY pending, its enqueues are held too (the pending
    one announces them): a held task is then never left to an inline NOTIFY whose statement
    might still fail and roll back.
    """

    def __init__(self, window: float, send: Callable[[list[str]], None], burst: int = 1) -> None:
        self.window = window
        self.burst = max(1, burst)
        self._refill = window / self.burst  # seconds to regain one token
        self._send = send
        self._cond = threading.Condition()
        self._tokens: dict[str, tuple[float, float]] = {}  # channel -> (tokens, as of when)
        self._pending: dict[str, float] = {}  # channel -> when its trailing NOTIFY is due
        self._thread: threading.Thread | None = None
        self._closed = False
        self.inline_sent = 0  # NOTIFYs admitted inline (for tests and stats)
        self.trailing_sent = 0  # trailing NOTIFYs sent (for tests and stats)

    def _available(self, channel: str, now: float) -> float:
        tokens, since = self._tokens.get(channel, (float(self.burst), now))
        if self._refill <= 0:
            return float(self.burst)
        return min(float(self.burst), tokens + (now - since) / self._refill)

    def _take(self, channel: str, now: float) -> bool:
        """Spend a token of ``channel`` if it has one (caller holds the lock)."""
        tokens = self._available(channel, now)
        if tokens < 1.0:
            self._tokens[channel] = (tokens, now)
            return False
        self._tokens[channel] = (tokens - 1.0, now)
        return True

    def admit(self, channels: Iterable[str]) -> tuple[list[str], list[str]]:
        now = time.monotonic()
        inline: list[str] = []
        held: list[str] = []
        with self._cond:
            for channel in dict.fromkeys(channels):
                if channel not in self._pending and self._take(channel, now):
                    inline.append(channel)
                else:
                    held.append(channel)
            self.inline_sent += len(inline)
        return inline, held

    def defer(self, held: Collection[str]) -> None:
        if not held:
            return
        with self._cond:
            now = time.monotonic()
            for channel in held:
                if channel not in self._pending:
                    missing = 1.0 - self._available(channel, now)  # token deficit
                    self._pending[channel] = now + max(0.0, missing) * self._refill
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(target=self._run, name="potatoq-pg-notify", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._pending:
                    self._cond.wait()
                if self._closed:
                    return
                now = time.monotonic()
                due = [c for c, t in self._pending.items() if t <= now]
                if not due:
                    self._cond.wait(min(self._pending.values()) - now)
                    continue
                for channel in due:
                    del self._pending[channel]
                    if not self._take(channel, now):  # due means a token is back (float rounding aside)
                        self._tokens[channel] = (0.0, now)
            self._deliver(due)

    def _deliver(self, channels: list[str]) -> None:
        try:
            self._send(channels)
            self.trailing_sent += len(channels)
        except Exception as exc:  # noqa: BLE001 - waiters still have the fallback poll
            log.warning("trailing NOTIFY for %s failed: %s", channels, exc)

    def close(self) -> None:
        """Send what is pending now and stop the timer thread."""
        with self._cond:
            pending, self._pending = list(self._pending), {}
            self._closed = True
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        if pending:
            self._deliver(pending)
