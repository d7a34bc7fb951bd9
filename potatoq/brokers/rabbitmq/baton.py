"""Which thread of a process drives its AMQP connection: the one that waits on it.

pika is not thread-safe: one thread at a time may poll the socket, run the ioloop's
callbacks and timers, or call into the connection and its channels. That was always the
I/O thread, so every task of a busy prefetch-1 worker crossed threads twice: the push woke
the I/O thread, which woke the task's thread, and the task's ack went back through the
ioloop's wake-up socket to the I/O thread, which sent it. On a 2-core machine those
wake-ups were most of what a no-op task cost beside RabbitMQ's own round trip.

Now the right to drive is a *baton* held by one thread at a time (``_driver``, guarded by
:attr:`Baton.cond`):

* A worker thread between two tasks drives the ioloop itself while nobody else does: it
  sends its ack at once (:meth:`Baton.submit_here`: the step runs on the calling thread
  and its bytes are sent before it returns), then, waiting for the next push, polls the
  socket and gives the baton back as soon as the push is buffered
  (:meth:`Baton.wait_until`). A busy worker's ack, the push of its next task and the wait
  for it all run on the task's thread.
* While another thread drives, a waiting thread sleeps on :attr:`Baton.cond` (callbacks
  run by the driver notify it) and takes the baton over when it is given back; a step is
  queued with the ioloop's thread-safe callback, which wakes the driver's poll.
* Operations (:meth:`~.io.AmqpLink.run`) are always queued (:meth:`Baton.queue`), never
  driven by their caller: it may be a task (an enqueue from inside one), and a task's
  soft time limit raises an exception in its thread at any moment, which must not land
  inside pika's frame handling.
* The I/O thread is the fallback. It takes the baton once nobody has held it for
  :data:`LAZY` seconds (a task runs: heartbeats, timers, pushes and background operations
  keep flowing), or at once when a step was queued with nobody to run it, and gives it
  back after the poll during which a thread started waiting. A task shorter than ``LAZY``
  never wakes it.
* Whatever the prefetch. With more than one delivery held (a prefetch multiplier, or
  several threads) the I/O thread used to drive all the time; once frames were sent on
  the call that writes them (:mod:`.eager`), the task's thread driving measured faster
  there too (paired runs with ``worker_prefetch_multiplier=4``: 0.85x the worker's CPU
  per task, 1.17x processed/s; with ``-t 2``, level; docs/benchmarks.md). Deliveries
  pushed while a task runs wait in the socket until the task's thread or, after ``LAZY``,
  the I/O thread reads them.

Everything that touched pika on the I/O thread runs, unchanged, on whichever thread
holds the baton; one holder at a time, handed over under the lock.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable

from pika.adapters.select_connection import IOLoop, PollEvents

log = logging.getLogger("potatoq.brokers.rabbitmq")

#: Seconds nobody may hold the baton before the I/O thread takes it (heartbeats, timers
#: and background steps wait at most this long while a task runs).
LAZY = 0.02


class DeadlineIOLoop(IOLoop):  # type: ignore[misc]  # pika has no type information here
    """pika's ioloop, whose next poll also ends by :attr:`poll_until` (monotonic; None: no
    bound of ours). The driver bounds each poll by the deadline of its wait with this
    attribute instead of a timer: a pika timer per poll (two per task on a busy worker) cost
    a heap push, a cancellation and, as cancelled timers piled up in the heap until their
    deadline passed, a dozen comparisons more per push and pop."""

    def __init__(self) -> None:
        self.poll_until: float | None = None
        super().__init__()

    def _get_remaining_interval(self) -> float | None:  # pika asks it before each poll
        interval: float | None = super()._get_remaining_interval()
        until = self.poll_until
        if until is None:
            return interval
        left = max(0.0, until - time.monotonic())
        return left if interval is None or left < interval else interval


# The hook above is pika's own (its poller asks it for the poll's timeout): fail at import,
# not with polls that overrun their deadline, if a pika release renamed it.
if not callable(getattr(IOLoop, "_get_remaining_interval", None)):  # pragma: no cover
    raise ImportError("this pika release's IOLoop has no _get_remaining_interval: potatoq needs it")


class Baton:
    """The driving of one process's ioloop (mixed into :class:`~.io.AmqpLink`)."""

    _ioloop: DeadlineIOLoop

    def _init_baton(self) -> None:
        lock = threading.RLock()  # reentrant: interrupt() notifies from a signal handler
        #: Guards the baton and, shared with :class:`~.consume.Intake`, its delivery
        #: buffer: the driver's callbacks notify waiting threads with it.
        self.cond = threading.Condition(lock)
        self._io_cond = threading.Condition(lock)  # the idle I/O thread sleeps on it
        self._driver: int | None = None  # thread ident of the holder
        self._released_at = time.monotonic()
        self._parked = 0  # threads in wait_until while another drives
        self._urgent = False  # a step was queued with nobody driving
        self._stopping = False  # the link is closed: nobody takes the baton again
        #: Called by the holder before a poll that may block (and before the link closes):
        #: sends the acks waiting to go together (see :mod:`.acks`).
        self.before_wait: Callable[[], None] | None = None
        # A wake-up socket of our own, registered with the ioloop: writing to it needs no
        # lock, so a signal handler (interrupt) can wake a driver blocked in its poll.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    def _watch_wake(self) -> None:
        """Holder: poll the wake-up socket with the connection's."""
        self._ioloop.add_handler(self._wake_r.fileno(), self._drain_wake, PollEvents.READ)

    def _drain_wake(self, _fd: int, _events: int) -> None:
        with contextlib.suppress(OSError):
            self._wake_r.recv(512)

    def wake(self) -> None:
        """Any thread, a signal handler too: end the driver's current poll."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def driving_here(self) -> bool:
        return self._driver == threading.get_ident()

    # ------------------------------------------------------------------ taking and giving

    def _take(self) -> bool:
        """Under cond: take the baton if it is free."""
        if self._driver is None and not self._stopping:
            self._driver = threading.get_ident()
            return True
        return False

    def _give_back(self) -> None:
        with self.cond:
            self._driver = None
            self._released_at = time.monotonic()
            if getattr(self._ioloop, "_callbacks", None):
                # Steps queued for the driver that nobody may drive soon: the I/O thread.
                self._urgent = True
                self._io_cond.notify()
            if self._parked:
                self.cond.notify_all()

    def _poll(self, deadline: float | None) -> None:
        """Holder: one poll of the socket (until an event, the next timer or ``deadline``),
        then the callbacks and timers due."""
        ioloop = self._ioloop
        ioloop.poll_until = deadline
        try:
            flush = self.before_wait
            if flush is not None and (deadline is None or deadline > time.monotonic()):
                flush()  # nothing may wait for a poll that blocks (submit_here's doesn't)
            ioloop.poll()
            ioloop.process_timeouts()
        except Exception:  # a callback's bug must not end the caller's wait (or the I/O thread)
            log.exception("the RabbitMQ ioloop failed")
        finally:
            ioloop.poll_until = None

    # ------------------------------------------------------------------ any thread

    def queue(self, fn: Callable[[], None]) -> None:
        """Any thread: run ``fn`` with the baton soon, on the driver (the I/O thread, woken
        now, when nobody drives)."""
        with self.cond:
            self._ioloop.add_callback_threadsafe(fn)  # wakes a driver blocked in its poll
            if self._driver is None:
                self._urgent = True
                self._io_cond.notify()

    def submit_here(self, fn: Callable[[], None]) -> None:
        """A thread outside any task: run ``fn`` with the baton without waiting for any
        reply, here and now if it is free (then send what it wrote), else queued."""
        with self.cond:
            if not self._take():
                self._ioloop.add_callback_threadsafe(fn)  # (after close nobody runs it)
                return
        try:
            fn()
            self._poll(time.monotonic())  # send now: nobody may drive for a while
        finally:
            self._give_back()

    def wait_until(self, ready: Callable[[], bool], timeout: float | None) -> bool:
        """A thread outside any task: block until ``ready()`` (called under :attr:`cond`) or
        ``timeout``; drive the ioloop meanwhile whenever nobody else does. Returns
        ``ready()``."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            with self.cond:
                if ready():
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                if not self._take():
                    self._parked += 1
                    try:
                        self.cond.wait(left)
                    finally:
                        self._parked -= 1
                    continue
            try:
                while True:
                    with self.cond:
                        if ready():
                            return True
                    if deadline is not None and time.monotonic() >= deadline:
                        return False
                    if self._stopping:
                        break  # the I/O thread closes the ioloop: wait without it
                    self._poll(deadline)
            finally:
                self._give_back()

    # ------------------------------------------------------------------ the I/O thread

    def _drive_in_background(self) -> None:
        """The I/O thread, holding the baton: drive until a thread waits for the baton or
        the link stops, give it back, and take it again once nobody holds it for
        ``LAZY`` (or a step is queued with nobody to run it)."""
        while True:
            while not self._stopping and not self._parked:
                self._poll(None)
            if self._stopping:
                return
            self._give_back()
            with self.cond:
                while True:
                    if self._stopping:
                        # Wait for the holder to finish its poll, then keep the baton
                        # for good: the ioloop is closed next.
                        if self._driver is None:
                            self._driver = threading.get_ident()
                            return
                        self._io_cond.wait(LAZY)
                        continue
                    idle = time.monotonic() - self._released_at
                    if self._driver is None and (self._urgent or idle >= LAZY):
                        self._urgent = False
                        self._driver = threading.get_ident()
                        break
                    self._io_cond.wait(LAZY if self._driver is not None else LAZY - idle)

    def _stop_driving(self) -> None:
        """Holder: the link is closed; the I/O thread ends after this poll."""
        with self.cond:
            self._stopping = True
            self._io_cond.notify()
            self.cond.notify_all()
        self.wake()

    def _close_baton(self) -> None:
        for sock in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()
