"""A thread's SQLite connection as the broker holds it, the job state literals, and the
backoff with which waiters re-check ``PRAGMA data_version``."""

from __future__ import annotations

import sqlite3

WAIT_MIN = 0.002  # data_version backoff: first check after 2 ms ...
WAIT_MAX = 0.050  # ... doubling up to 50 ms

SCHEDULED, READY, RUNNING = 0, 1, 2
STATE_NAMES = {SCHEDULED: "scheduled", READY: "ready", RUNNING: "running"}  # for queued_task()


class ThreadConnection:
    """One thread's connection, plus the interrupts its wait() calls have seen."""

    __slots__ = ("conn", "interrupts")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # interrupt() calls counted when this thread's last wait() returned: one made since
        # makes the next wait() return at once, even if it came before that wait started.
        self.interrupts = 0

    def data_version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])
