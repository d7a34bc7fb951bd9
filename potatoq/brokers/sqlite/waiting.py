"""Waiting for work on the SQLite broker: ``wait()`` and ``interrupt()`` (mixed into
:class:`SQLiteBroker`).

A wait reads ``PRAGMA data_version``, then looks for work (one cheap read), then sleeps
until the doorbell rings (``doorbell``), an ETA falls due, interrupt() is called or the
fallback poll sees ``data_version`` change; see the SQLite page of the docs.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from potatoq.exceptions import OperationalError

from ..base import Broker
from .connection import WAIT_MAX, WAIT_MAX_RUNG, WAIT_MIN, ThreadConnection
from .doorbell import Doorbell, Listener


class SQLiteWaiting(Broker):
    """``wait`` / ``interrupt`` of :class:`SQLiteBroker`."""

    if TYPE_CHECKING:
        clock: Callable[[], float]
        path: str
        _doorbell: Doorbell | None
        _listeners: set[Listener]
        _pid: int
        _wake: threading.Condition
        _interrupts: int

        def _conn(self) -> ThreadConnection: ...
        def _read(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]: ...
        def _queue_list(self, queues: Sequence[str]) -> str: ...
        def _history_flush(self) -> None: ...

    def _wake_condition(self) -> threading.Condition:
        if self._pid != os.getpid():  # a lock inherited through fork() may be held forever
            self._pid, self._wake = os.getpid(), threading.Condition()
            self._listeners = set()  # the parent's threads' sockets: not this process's waiters
        return self._wake

    def _sleep(self, listener: Listener | None, seconds: float, interrupts: int) -> bool:
        """Sleep up to ``seconds`` (a doorbell ring ends it early); False if interrupt() was
        called since ``interrupts``."""
        if listener is None:
            return self._pause(seconds, interrupts)
        if self._interrupts != interrupts:
            return False
        listener.wait(seconds)  # interrupt() rings it too: no wake-up is missed
        return self._interrupts == interrupts

    def _pause(self, seconds: float, interrupts: int) -> bool:
        """Sleep ``seconds`` deaf to the doorbell; False if interrupt() was called since
        ``interrupts``."""
        wake = self._wake_condition()
        with wake:
            if self._interrupts != interrupts:
                return False
            wake.wait(seconds)
            return self._interrupts == interrupts

    def _listener(self, local: ThreadConnection, queues: tuple[str, ...]) -> Listener | None:
        """This thread's doorbell socket, made on its first wait, announced for ``queues``
        (None: polling only)."""
        if self._doorbell is None:
            return None
        try:
            if local.listener is None:
                local.listener = self._doorbell.listener()
                with self._wake_condition():
                    self._listeners.add(local.listener)
            local.listener.announce(queues)
        except OSError:
            self._doorbell = None  # e.g. a read-only directory: poll as before
            return None
        return local.listener

    def wait(self, queues: Sequence[str], timeout: float) -> None:
        """Return at once if work is ready (or due) in ``queues``; otherwise when another
        connection commits, when the earliest scheduled task falls due, or after ``timeout``.

        data_version is read *before* the cheap read for work, so a commit that the read
        misses changes it: nothing can land unnoticed between looking and sleeping.
        """
        self._history_flush()  # idle: held history rows go in now (issue 31)
        local = self._conn()
        names = self._queue_list(queues)
        deadline = time.monotonic() + max(0.0, timeout)
        interrupts = local.interrupts
        listener = self._listener(local, tuple(queues))
        if listener is None:
            self._wait(local, None, names, deadline, interrupts)
            return
        # Waiting is announced, and old rings forgotten, before data_version is read: a
        # commit after that read rings this thread.
        listener.listening(True)
        listener.drain()
        try:
            self._wait(local, listener, names, deadline, interrupts)
        finally:
            listener.listening(False)

    def _wait(
        self, local: ThreadConnection, listener: Listener | None, names: str, deadline: float, interrupts: int
    ) -> None:
        cap = WAIT_MAX if listener is None else WAIT_MAX_RUNG
        try:
            baseline = local.data_version()
        except sqlite3.OperationalError as exc:
            raise OperationalError(f"SQLite database {self.path!r}: {exc}") from exc
        first_deadline = self._work_or_deadline(names, deadline)
        if first_deadline is None:
            return
        deadline = first_deadline
        # The fallback poll's backoff, and how long a ring that brought nothing for these
        # queues mutes the next. A thread with a doorbell carries both over from a wait that
        # timed out (a worker waits a second at a time): an idle thread keeps polling once a
        # second instead of starting again at 2 ms, and rings still wake it at once.
        delay, pause = (local.backoff, local.pause) if listener is not None else (WAIT_MIN, WAIT_MIN)
        timed_out = False
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    return
                if not self._sleep(listener, min(delay, remaining), interrupts):
                    return
                version = local.data_version()
                if version != baseline:
                    # Another connection committed: return only if it concerns these queues.
                    # A commit elsewhere (any busy database has them every few ms) costs one
                    # cheap read, and the backoff goes on, so idle threads don't poll.
                    baseline = version
                    new_deadline = self._work_or_deadline(names, deadline)
                    if new_deadline is None:
                        return
                    deadline = new_deadline
                    if listener is not None:
                        # Rung for other queues: a busy database rings for every commit, so
                        # wait a little (doubling, up to WAIT_MAX) before hearing the next
                        # ring; rings meanwhile stay in the socket and end the next sleep at
                        # once. At most one cheap read per 50 ms, as without the doorbell.
                        if not self._pause(min(pause, remaining), interrupts):
                            return
                        pause = min(pause * 2, WAIT_MAX)
                delay = min(delay * 2, cap)
        finally:
            local.interrupts = self._interrupts
            local.backoff, local.pause = (delay, pause) if timed_out else (WAIT_MIN, WAIT_MIN)

    def _work_or_deadline(self, names: str, deadline: float) -> float | None:
        """None if work is ready or due in ``names``; else ``deadline``, brought forward to
        when the earliest scheduled task of ``names`` falls due."""
        ready, due = self._read("job_peek", {"queues": names, "now": self.clock()})[0]
        if ready or due:
            return None
        next_due = self._read("job_next_due", {"queues": names})[0][0]
        if next_due is not None:
            deadline = min(deadline, time.monotonic() + max(0.0, float(next_due) - self.clock()))
        return deadline

    def interrupt(self) -> None:
        wake = self._wake_condition()
        with wake:
            self._interrupts += 1
            wake.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            listener.ring_self()
