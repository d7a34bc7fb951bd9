"""WAL checkpoints the broker runs itself, after a commit, outside the timed write-lock hold.

SQLite's auto-checkpoint (``wal_autocheckpoint``, 1000 frames) runs inside the
``sqlite3_step()`` of the COMMIT that takes the WAL past the threshold: after the write
lock is released (a PASSIVE checkpoint never blocks writers), but before COMMIT returns.
So a broker that timed its hold up to COMMIT returning counted the checkpoint too: a
one-row enqueue after a bulk load by another program was "holding the write lock" for
2.8 s while another process took that lock 1,500 times (``holds.py``). The broker's
connections turn it off (``wal_autocheckpoint = 0``) and run the same PASSIVE checkpoint
themselves, once COMMIT has returned and the hold is recorded, on the same threshold.

Knowing the threshold is crossed must cost next to nothing per commit, and SQLite tells
the WAL's frame count only to a checkpoint. The WAL file tells it (its format is
documented, https://www.sqlite.org/fileformat2.html#walformat): the header's salts name
the current generation of the log (a checkpoint that lets the next writer start over
rewrites them), and a frame belongs to the current generation iff its own header carries
the same salts. So "frame N of this generation exists" is "the log holds at least N
frames": two ``pread`` calls, at most once a millisecond per thread. The file is opened
read-only beside SQLite and holds no lock (SQLite locks the database and ``-shm`` files
only, so closing it releases none of SQLite's POSIX locks).

The checkpoint delays the call whose commit triggered it, as SQLite's own did (an enqueue,
a settle): it is timed on its own, the longest per process kept in ``broker.checkpoints``
and logged (INFO) past ``slow_write_ms``.

Shrinking the WAL file is another matter: SQLite truncates it to ``journal_size_limit``
inside the commit that starts the log over, under the write lock, and truncating costs
time in proportion to what is cut (about 0.9 ms per MB on the shared 2-core VM: a 1 GB
WAL left by a bulk load held every writer for seconds). So the broker's connections
never truncate in their own commits (``journal_size_limit = -1``); after a checkpoint
that copied the whole log, a WAL file over the limit is cut by at most ``TRIM_STEP``
bytes in a transaction of its own (:meth:`Checkpoints.trim_step`), timed as a hold like
any other, and again after each following commit of that thread until it fits.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass

from .holds import writer_name

log = logging.getLogger("potatoq.brokers.sqlite")

#: WAL frames (pages) after which a commit is followed by a checkpoint: SQLite's default
#: ``wal_autocheckpoint``, so checkpoints come as often as before, only untimed as holds.
CHECKPOINT_FRAMES = 1000
#: the WAL file is looked at most this often per thread (seconds): a few µs of syscalls
#: on a loaded machine, against a commit every ~0.1 ms on a busy one.
LOOK_INTERVAL = 0.001
#: most bytes the WAL file is cut by in one write transaction: ~15 ms of the write lock on
#: the shared 2-core VM
TRIM_STEP = 16 * 1024 * 1024

_HEADER = 32  # WAL header bytes; each frame is a 24-byte header and a page
_FRAME_HEADER = 24


class WalWatch:
    """One connection's view of its database's WAL file: is a checkpoint due?"""

    __slots__ = ("_every", "_fd", "_generation", "_next_look", "_path", "_slot")

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd: int | None = None
        self._generation = b""  # the salts of the log the last look found
        self._slot = CHECKPOINT_FRAMES  # a checkpoint is due once this frame exists
        self._every = CHECKPOINT_FRAMES  # frames between checkpoints (1 while trimming)
        self._next_look = 0.0

    def due(self) -> bool:
        """True when the WAL holds ``CHECKPOINT_FRAMES`` more frames than at the last
        checkpoint (counted from its start after the log started over)."""
        now = time.monotonic()
        if now < self._next_look:
            return False
        self._next_look = now + LOOK_INTERVAL
        try:
            if self._fd is None:
                self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
            header = os.pread(self._fd, _HEADER, 0)
            if len(header) < _HEADER:
                return False  # empty: nothing written since it was created or truncated
            if header[16:24] != self._generation:  # the log started over
                self._generation = header[16:24]
                self._slot = self._every
            page_size = int.from_bytes(header[8:12], "big") or 65536  # 1 stands for 65536
            offset = _HEADER + (self._slot - 1) * (page_size + _FRAME_HEADER)
            frame = os.pread(self._fd, 16, offset)
        except OSError:
            return False  # no WAL file (yet): nothing to checkpoint
        return frame[8:16] == self._generation

    def checkpointed(self, frames: int, *, trimming: bool = False) -> None:
        """A checkpoint ran with ``frames`` frames in the log: the next one is due after
        ``CHECKPOINT_FRAMES`` more of this generation (or of the next one, from its start),
        so a reader that kept it from finishing doesn't make every commit retry; or, while
        the file is being trimmed, after the next commit."""
        self._every = 1 if trimming else CHECKPOINT_FRAMES
        self._slot = max(frames, 0) + self._every

    def size(self) -> int:
        """The WAL file's size in bytes (0 if it can't be read)."""
        try:
            return os.fstat(self._fd).st_size if self._fd is not None else 0
        except OSError:
            return 0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class LongestCheckpoint:
    """The longest checkpoint this process ran so far."""

    seconds: float
    #: frames in the WAL, and how many of them are in the database file afterwards (fewer
    #: when a reader still needed older pages, or another checkpoint was running)
    frames: int
    checkpointed: int
    #: the broker method whose commit it followed (that call waited for it)
    after: str


class Checkpoints:
    """The checkpoints one broker object ran in this process: how many, the longest."""

    def __init__(self, slow_ms: int, size_limit: int) -> None:
        self._slow = slow_ms / 1000
        self._size_limit = size_limit
        self._lock = threading.Lock()
        self.count = 0
        self.longest = LongestCheckpoint(0.0, 0, 0, "")

    def run_checkpoint(self, conn: sqlite3.Connection, watch: WalWatch) -> int | None:
        """A PASSIVE checkpoint on ``conn`` (outside any transaction), timed. Returns the
        size to cut the WAL file to (a step of the trim), or None. A failure is logged and
        left to the next one: the commit before it stands."""
        started = time.perf_counter()
        try:
            busy, frames, checkpointed = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            log.debug("SQLite WAL checkpoint failed (the next commit tries again): %s", exc)
            watch.checkpointed(0)
            return None
        seconds = time.perf_counter() - started
        size = watch.size() if not busy and frames == checkpointed else 0
        trim_to = max(self._size_limit, size - TRIM_STEP) if size > self._size_limit else None
        watch.checkpointed(int(frames), trimming=trim_to is not None)
        self._note_checkpoint(seconds, int(frames), int(checkpointed))
        return trim_to

    def _note_checkpoint(self, seconds: float, frames: int, checkpointed: int) -> None:
        with self._lock:
            self.count += 1
            if seconds <= self.longest.seconds:
                return
            self.longest = LongestCheckpoint(seconds, frames, checkpointed, writer_name())
        if seconds >= self._slow:
            log.info(
                "SQLite WAL checkpoint after %s took %.0f ms (%d of %d WAL frames now in the database "
                "file), the longest in this process so far. It ran after the write lock was released: "
                "other writers went on; only this %s call waited",
                self.longest.after,
                seconds * 1000,
                checkpointed,
                frames,
                self.longest.after,
            )


def trim_step(conn: sqlite3.Connection, size: int) -> None:
    """Inside a write transaction on ``conn`` (the WAL fully checkpointed): make its commit
    start the log over and cut the file to ``size`` bytes. A write that changes nothing
    (the header's ``user_version``, rewritten with its own value) is the first frame of
    the new log; only this connection's limit is raised for it. If another writer started
    the log over first, nothing is cut this time (the next checkpoint tries again)."""
    conn.execute(f"PRAGMA journal_size_limit = {int(size)}")
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    conn.execute(f"PRAGMA user_version = {version}")


def no_trim(conn: sqlite3.Connection) -> None:
    """The broker's connections never cut the WAL file in their commits (see trim_step)."""
    conn.execute("PRAGMA journal_size_limit = -1")
