"""How a benchmark task reports that it ran: one ``O_APPEND`` write to a local file.

Every system's tasks call the same two functions, so completion is observed the same way
for all of them and costs about a microsecond (a broker round trip per task to count
completions would cost more than some of the systems' own work). The harness names the
files in the environment of each worker it starts:

* ``BENCH_DONE``: ``noop`` appends its completion time, one fixed-width line per task, so
  the harness counts completions from the file size and reads first and last at the end;
* ``BENCH_STARTED``: ``stamp`` appends how long after it was sent it started running.

Writes of under ``PIPE_BUF`` bytes to an ``O_APPEND`` file don't interleave, so worker
processes, threads and forked work horses can all share the files. Only the standard
library is imported: this module runs inside every peer's virtualenv.
"""

from __future__ import annotations

import os
import time

DONE_ENV = "BENCH_DONE"
STARTED_ENV = "BENCH_STARTED"
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
