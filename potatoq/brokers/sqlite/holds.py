"""How long this process's write transactions hold SQLite's one write lock.

Every other writer of the database (other worker processes, producers, the dashboard)
waits while a write transaction runs, so the longest one bounds their wait. Timing the
waits from outside can't tell a long transaction from a waiter that lost the race to a
stream of short ones (SQLite's busy handler sleeps and retries; it queues nobody), so the
broker times its own transactions: from the moment ``BEGIN IMMEDIATE`` returns (the lock
is held) to the moment ``COMMIT`` returns. Its connections don't checkpoint inside COMMIT
(SQLite's would run there, after the lock is released, and be counted): the broker runs
checkpoints after the commit, timed apart (``wal.py``).

The longest is kept per process, and logged when it grows past ``slow_write_ms`` (a
transport option, 100 ms by default), with what the transaction was: a log line per new
record, never one per slow transaction, so a loaded machine doesn't flood the log.
"""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass
from types import FrameType

log = logging.getLogger("potatoq.brokers.sqlite")


@dataclass(frozen=True)
class LongestWrite:
    """The longest write transaction of this process so far."""

    seconds: float
    #: what it was: the broker method that wrote (``claim``, ``settle``, ``enqueue``, …)
    what: str


class WriteHolds:
    """The longest write-lock hold of one broker object in this process."""

    def __init__(self, slow_ms: int) -> None:
        self._slow = slow_ms / 1000
        self._lock = threading.Lock()
        self.longest = LongestWrite(0.0, "")

    def held(self, seconds: float, what: str) -> None:
        """Note one transaction that held the lock ``seconds`` (cheap unless a record)."""
        if seconds <= self.longest.seconds:
            return
        with self._lock:
            if seconds <= self.longest.seconds:
                return
            self.longest = LongestWrite(seconds, what)
        if seconds >= self._slow:
            log.warning(
                "SQLite write transaction (%s) held the database's write lock for %.0f ms, the longest "
                "in this process so far: every other writer waited as long (slow_write_ms=%d)",
                what,
                seconds * 1000,
                round(self._slow * 1000),
            )


#: frames that are the transaction's plumbing, not the broker method that wrote
_PLUMBING = frozenset(
    {"_write", "_write_with_history", "__exit__", "held", "writer_name", "run_checkpoint", "_note_checkpoint"}
)


def writer_name() -> str:
    """The broker method whose transaction ended (read only for a new record: walks frames)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and _is_plumbing(frame):
        frame = frame.f_back
    return frame.f_code.co_name if frame is not None else "?"


def _is_plumbing(frame: FrameType) -> bool:
    return frame.f_code.co_name in _PLUMBING or frame.f_code.co_filename.endswith("contextlib.py")
