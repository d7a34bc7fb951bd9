"""What a child tells its supervisor, one JSON array per line over a pipe.

The supervisor has to know which deliveries each child holds, so that it can settle them if
the child dies, enforce hard time limits, extend leases and report running tasks in
heartbeats. Events (the first element names the kind):

``["s", thread, soft, hard, started, id, token, deliveries, queue, handle, claimed_at,
node, pid, raw]``
              start: a delivery was claimed; ``started`` is the child's monotonic clock
              (the same clock in every process on Linux), ``raw`` the message in base64
``["g", id, token]``  settling: the task ran; its settle is being retried (stop the
              hard-limit clock)
``["e", id, token]``  end: the delivery was settled (or refused as stale): forget it
``["r", why]``        retire: the child is leaving on its own (max tasks, memory)

This runs for every task, so both ends are kept cheap: flat arrays through the C JSON
codec (no object hooks), and the supervisor decodes a start's message only when it needs
the delivery itself (a lost child, a lease extension, a heartbeat), not for every task.

Cheaper still is not writing at all. On a broker that can list what one process holds
(``held_by``) and lets the supervisor settle it, a child reports only the tasks with a hard
time limit (the supervisor's clock has to start with them): for the others the supervisor
asks the broker when it needs them (a dead child, leases, heartbeats). Writing, waking the
supervisor and parsing cost about a sixth of a no-op task's CPU. Either way a child counts
the tasks it finished in a word of memory it shares with its supervisor (``Tally``).

A child writes whole lines under a lock (several threads share one pipe); the supervisor
reads without blocking and keeps an incomplete tail for the next read. A line cut short by
the child's death is dropped: it can only be the last one, and a lost ``end`` just means
the supervisor's settle is refused as stale.
"""

from __future__ import annotations

import binascii
import contextlib
import errno
import fcntl
import functools
import json
import mmap
import os
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from potatoq.brokers.base import Delivery, WorkerRef, decode_delivery

__all__ = ["ChildEvent", "EventReader", "EventWriter", "Tally", "reports_every_task", "widen_pipe"]

#: Room for a burst of events while the supervisor batches its reads (Linux lets an
#: unprivileged process grow a pipe to /proc/sys/fs/pipe-max-size, 1 MiB by default).
PIPE_SIZE = 1 << 20


def widen_pipe(fd: int) -> None:
    """Best effort: a full pipe only makes the child wait for the supervisor's next read."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if set_size is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, set_size, PIPE_SIZE)


def reports_every_task(capabilities: Any) -> bool:
    """Whether a child must tell its supervisor of every task, or only of hard-limited ones
    (the supervisor can then ask the broker which deliveries a child holds, and settle them)."""
    return not (capabilities.supervisor_settles and capabilities.lists_holders)


class Tally:
    """How many tasks a child finished: one 64-bit word in an anonymous shared mapping,
    made by the supervisor before the fork, written by the child, read by the supervisor.
    An aligned 8-byte store is a single write on the platforms potatoq runs on."""

    def __init__(self) -> None:
        self._map = mmap.mmap(-1, mmap.PAGESIZE)  # MAP_SHARED: the child's writes are seen
        self._word = memoryview(self._map).cast("Q")
        self._lock = threading.Lock()  # the child's threads add to it

    def add(self) -> None:
        with self._lock:
            self._word[0] += 1

    @property
    def value(self) -> int:
        return int(self._word[0])

    def close(self) -> None:
        self._word.release()
        self._map.close()


class ChildEvent(NamedTuple):  # a tuple: cheap to build, the supervisor makes one per event
    kind: str  # start | settling | end | retire
    task_id: str = ""
    token: str = ""
    load: Callable[[], Delivery] | None = None  # start: decodes the delivery when called
    soft: float | None = None
    hard: float | None = None
    thread: int = 0
    why: str = ""
    started: float | None = None  # start: the child's time.monotonic() at the claim

    @property
    def key(self) -> tuple[str, str]:
        return (self.task_id, self.token)

    @property
    def delivery(self) -> Delivery | None:
        return self.load() if self.load is not None else None


class EventWriter:
    """The child's end: thread-safe, blocking writes of whole lines.

    With ``every_task=False`` only deliveries with a hard time limit are reported (their
    start and end); ``tally`` counts every finished task either way."""

    def __init__(self, fd: int, tally: Tally | None = None, *, every_task: bool = True) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._tally = tally
        self._every_task = every_task
        self._reported: set[tuple[str, str]] = set()  # when not every task: the ones reported

    def _send(self, data: bytes) -> None:
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]

    def _start(self, delivery: Delivery, soft: float | None, hard: float | None, thread: int) -> bytes:
        if self._every_task:
            return _start_line(delivery, soft, hard, thread)
        if hard is None:
            return b""
        self._reported.add((delivery.id, delivery.token))
        return _start_line(delivery, soft, hard, thread)

    def _end(self, delivery: Delivery) -> bytes:
        if self._tally is not None:
            self._tally.add()
        if self._every_task:
            return _end_line(delivery)
        key = (delivery.id, delivery.token)
        if key not in self._reported:
            return b""
        self._reported.discard(key)
        return _end_line(delivery)

    def start(self, delivery: Delivery, soft: float | None, hard: float | None, thread: int = 0) -> None:
        if line := self._start(delivery, soft, hard, thread):
            self._send(line)

    def settling(self, delivery: Delivery) -> None:
        if self._every_task or (delivery.id, delivery.token) in self._reported:
            self._send(_line(["g", delivery.id, delivery.token]))

    def end(self, delivery: Delivery) -> None:
        if line := self._end(delivery):
            self._send(line)

    def end_and_start(
        self, done: Delivery, nxt: Delivery, soft: float | None, hard: float | None, thread: int = 0
    ) -> None:
        """Both in one write: the supervisor never sees a moment with the next task unknown."""
        if lines := self._end(done) + self._start(nxt, soft, hard, thread):
            self._send(lines)

    def retire(self, why: str) -> None:
        self._send(_line(["r", why]))


def _line(fields: list[Any]) -> bytes:
    return json.dumps(fields).encode() + b"\n"  # ensure_ascii: never a raw newline inside


# The C string encoder of the json module: a quoted, escaped, ASCII-only JSON string.
_quote: Callable[[str], str] = json.encoder.encode_basestring_ascii


def _number(value: float | None) -> str:
    return "null" if value is None else repr(float(value))  # finite: a time or a limit


@functools.lru_cache(maxsize=256)
def _limit(value: float | None) -> str:
    """``_number`` of a time limit: the same few values task after task, so formatted once."""
    return _number(value)


@functools.lru_cache(maxsize=256)
def _quoted_name(name: str) -> str:
    """A queue or node name as a JSON string: a child has one node and a few queues."""
    return _quote(name)


def _time(value: float) -> str:
    # The child's monotonic clock to the microsecond (for the hard limit): cheaper than
    # the shortest repr(). The claim time keeps repr(): the delivery round-trips exactly.
    return f"{value:.6f}"


def _start_line(delivery: Delivery, soft: float | None, hard: float | None, thread: int) -> bytes:
    # Formatted by hand, not json.dumps'd: a child writes one per task, and this costs a
    # few microseconds less. Every string goes through the JSON string encoder.
    handle = delivery.handle
    raw = binascii.b2a_base64(delivery.raw, newline=False).decode("ascii")
    return (
        f'["s",{int(thread)},{_limit(soft)},{_limit(hard)},{_time(time.monotonic())},'
        f"{_quote(delivery.id)},{_quote(delivery.token)},{int(delivery.deliveries)},"
        f"{_quoted_name(delivery.queue)},"
        f"{'null' if handle is None else _quote(handle) if isinstance(handle, str) else int(handle)},"
        f"{_number(delivery.claimed_at)},{_quoted_name(delivery.worker.node)},{int(delivery.worker.pid)},"
        f'"{raw}"]\n'
    ).encode()


def _end_line(delivery: Delivery) -> bytes:
    return f'["e",{_quote(delivery.id)},{_quote(delivery.token)}]\n'.encode()


class EventReader:
    """The supervisor's end: non-blocking reads, returning the complete events so far."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._tail = b""
        os.set_blocking(fd, False)

    def read(self) -> tuple[list[ChildEvent], bool]:
        """Events available now, and whether the pipe reached end-of-file."""
        chunks: list[bytes] = []
        eof = False
        while True:
            try:
                chunk = os.read(self.fd, PIPE_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                eof = True
                break
            if not chunk:
                eof = True
                break
            chunks.append(chunk)
        if not chunks:
            return [], eof
        data = self._tail + b"".join(chunks)
        end = data.rfind(b"\n") + 1
        self._tail = data[end:]
        if not end:
            return [], eof
        # All the complete lines as one JSON array: one decoder call for the whole batch.
        text = data[: end - 1].decode().replace("\n", ",")
        return [_parse(fields) for fields in json.loads(f"[{text}]")], eof


def _parse(fields: list[Any]) -> ChildEvent:
    kind = fields[0]
    if kind == "s":
        return ChildEvent(
            "start",
            fields[5],
            fields[6],
            functools.partial(_delivery, fields),
            fields[2],
            fields[3],
            fields[1],
            started=fields[4],
        )
    if kind == "e":
        return ChildEvent("end", fields[1], fields[2])
    if kind == "g":
        return ChildEvent("settling", fields[1], fields[2])
    return ChildEvent("retire", why=fields[1])


def _delivery(fields: list[Any]) -> Delivery:
    return decode_delivery(
        id=fields[5],
        queue=fields[8],
        raw=binascii.a2b_base64(fields[13]),
        token=fields[6],
        deliveries=fields[7],
        worker=WorkerRef(fields[11], fields[12]),
        handle=fields[9],
        claimed_at=fields[10],
    )
