"""How a benchmark task reports that it ran: one ``O_APPEND`` write to a local file.

Every system's tasks call the same two functions, so completion is observed the same way
for all of them and costs about a microsecond (a broker round trip per task to count
completions would cost more than some of the systems' own work). The harness names the
files in the environment of each worker it starts:

* ``BENCH_DONE``: ``noop`` appends its completion time, one fixed-width line per task, so
  the harness counts completions from the file size and reads first and last at the end;
* ``BENCH_STARTED``: ``stamp`` appends how long after it was sent it started running,
  then writes a byte to the FIFO named by ``BENCH_STARTED_FIFO`` (when set), on which the
  latency driver blocks: a driver that polled the file instead would wake every few hundred
  microseconds and take CPU from the two cores the measured worker runs on.

Writes of under ``PIPE_BUF`` bytes to an ``O_APPEND`` file don't interleave, so worker
processes, threads and forked work horses can all share the files. Only the standard
library is imported: this module runs inside every peer's virtualenv.
"""

from __future__ import annotations

import contextlib
import os
import select
import time

DONE_ENV = "BENCH_DONE"
STARTED_ENV = "BENCH_STARTED"
STARTED_FIFO_ENV = "BENCH_STARTED_FIFO"
DONE_RECORD = 18  # "%017.6f\n" of time.time(): fixed width until the year 2286

_fds: dict[tuple[int, str], int] = {}


def _fd(variable: str) -> int:
    key = (os.getpid(), variable)  # a forked child opens its own descriptor
    fd = _fds.get(key)
    if fd is None:
        fd = _fds[key] = os.open(os.environ[variable], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    return fd


def done() -> None:
    """Called by every system's ``noop`` task."""
    os.write(_fd(DONE_ENV), b"%017.6f\n" % time.time())


def started(sent: float) -> None:
    """Called first thing by every system's ``stamp`` task, with the time it was sent."""
    os.write(_fd(STARTED_ENV), b"%.6f\n" % (time.time() - sent))
    fifo = os.environ.get(STARTED_FIFO_ENV)
    if fifo:
        try:
            os.write(_fifo_fd(fifo), b"\n")
        except OSError:  # no driver reading (yet): it also counts the file's lines
            fd = _fifo_fds.pop(os.getpid(), None)
            if fd is not None:
                os.close(fd)


_fifo_fds: dict[int, int] = {}


def _fifo_fd(path: str) -> int:
    fd = _fifo_fds.get(os.getpid())
    if fd is None:
        # non-blocking: opening fails at once (ENXIO) when no driver has the FIFO open
        fd = _fifo_fds[os.getpid()] = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    return fd


def open_started_fifo(path: str) -> int:
    """The driver's end of the FIFO (made here if missing), for :func:`wait_started`."""
    if not os.path.exists(path):
        os.mkfifo(path, 0o600)
    # read-write, so the FIFO never reports end-of-file while no task has it open
    return os.open(path, os.O_RDWR | os.O_NONBLOCK)


def wait_started(fd: int, timeout: float) -> None:
    """Block until a ``stamp`` task wrote to the FIFO, or ``timeout`` seconds."""
    ready, _, _ = select.select([fd], [], [], timeout)
    if ready:
        with contextlib.suppress(BlockingIOError):
            os.read(fd, 4096)


def count_done(path: str) -> int:
    try:
        return os.stat(path).st_size // DONE_RECORD
    except FileNotFoundError:
        return 0


def count_started(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0
