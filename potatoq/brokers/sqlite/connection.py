"""A thread's SQLite connection as the broker holds it, the job state literals, and the
backoff with which waiters re-check ``PRAGMA data_version``."""

from __future__ import annotations

import contextlib
import sqlite3
import threading

from ..base import close_when_idle
from .doorbell import Listener
from .wal import WalWatch

WAIT_MIN = 0.002  # data_version backoff: first check after 2 ms ...
WAIT_MAX = 0.050  # ... doubling up to 50 ms
# ... or up to 1 s for a thread that hears the doorbell: potatoq's commits ring it, so the
# poll only catches writes by other programs (and a ring lost in a rare race).
WAIT_MAX_RUNG = 1.0

SCHEDULED, READY, RUNNING = 0, 1, 2
STATE_NAMES = {SCHEDULED: "scheduled", READY: "ready", RUNNING: "running"}  # for queued_task()


class ThreadConnection:
    """One thread's connection, plus the interrupts its wait() calls have seen."""

    __slots__ = ("backoff", "busy", "conn", "interrupts", "listener", "pause", "wal")

    def __init__(self, conn: sqlite3.Connection, wal: WalWatch) -> None:
        self.conn = conn
        #: Held by the owner thread around each statement and transaction, and by close():
        #: the broker's close() closes every thread's connection, and closing a sqlite3
        #: connection while another thread runs a statement on it crashes the interpreter
        #: (a segmentation fault in the sqlite3 module, seen with the dashboard's sampler).
        #: Reentrant: a transaction's checkpoint runs statements inside it.
        self.busy = threading.RLock()
        #: says when this connection's commits should be followed by a checkpoint (wal.py)
        self.wal = wal
        #: this thread's doorbell socket, made by its first wait() (None: not yet, or no doorbell)
        self.listener: Listener | None = None
        #: wait()'s poll backoff and ring pause, kept from a wait that timed out (see wait)
        self.backoff = WAIT_MIN
        self.pause = WAIT_MIN
        # interrupt() calls counted when this thread's last wait() returned: one made since
        # makes the next wait() return at once, even if it came before that wait started.
        self.interrupts = 0

    def data_version(self) -> int:
        with self.busy:
            return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        """Close it once no statement runs on it (from any thread; see close_when_idle). The
        owner's next use after a close raises sqlite3's ProgrammingError ("Cannot operate
        on a closed database"), never a crash."""
        close_when_idle(self.busy, self._close, "SQLite")

    def _close(self) -> None:
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.close()
        with contextlib.suppress(OSError):
            self.wal.close()
        self.conn.close()
