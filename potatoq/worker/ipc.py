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
``["t", request, name, per_second]``  token: a thread wants to run rate-limited task
              ``name``; the supervisor answers ``request`` on the child's grants pipe
              when the node's rate allows (``ratelimit``)

This runs for every task, so both ends are kept cheap: flat arrays through the C JSON
codec (no object hooks), and the supervisor decodes a start's message only when it needs
the delivery itself (a lost child, a lease extension, a heartbeat), not for every task.

Cheaper still is not writing at all. On a broker that can list what one process holds
(``held_by``) and lets the supervisor settle it, a child writes what each of its threads
runs into memory it shares with its supervisor (``SlotBoard``: task id, fencing token,
start and hard time limit, no system call), and the supervisor reads that for the hard
limits and asks the broker for the deliveries themselves when it needs them (a dead
child, leases, heartbeats). Writing to the pipe, waking the supervisor and parsing cost
about a sixth of a no-op task's CPU. The pipe still carries a task whose hard limit is
shorter than ``PIPE_UNDER`` (the supervisor reads the board only about once a second) or
whose id doesn't fit a slot. Either way a child counts the tasks it finished in a word of
shared memory (``Tally``).

A broker that can't list what a process holds (RabbitMQ: only the channel a delivery came
on knows it) gets a ``CarryBoard`` instead: each thread's slot holds the whole start line
the pipe would carry, message included, so the supervisor still has the delivery of a
child that died, or of a task to report in a heartbeat, without a pipe write per task.

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
import math
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from potatoq.brokers.base import Delivery, WorkerRef, decode_delivery

__all__ = [
    "PIPE_UNDER",
    "CarryBoard",
    "ChildEvent",
    "EventReader",
    "EventWriter",
    "SharedFlag",
    "SlotBoard",
    "Tally",
    "parse_start",
    "reports_every_task",
    "widen_pipe",
]

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
    """Whether a child must tell its supervisor of every task over the pipe, or can use a
    ``SlotBoard`` (the supervisor can then ask the broker which deliveries a child holds,
    and settle them)."""
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


class SharedFlag:
    """One byte in an anonymous shared mapping, made before the fork: the supervisor sets
    it just before it sends the child the signal of ``revoke(terminate=True)``, so that the
    child tells that SIGTERM ("stop the task now") from a shutdown's ("stop claiming")."""

    def __init__(self) -> None:
        self._map = mmap.mmap(-1, mmap.PAGESIZE)

    def set(self) -> None:
        self._map[0] = 1

    def is_set(self) -> bool:
        return self._map[0] == 1

    def close(self) -> None:
        self._map.close()


#: Hard time limits shorter than this (seconds) are reported over the pipe: the supervisor
#: reads the board at least once a second, and must see a task before its limit is up.
PIPE_UNDER = 2.0


class SlotBoard:
    """What each thread of a child runs now: one slot per thread in an anonymous shared
    mapping, made by the supervisor before the fork. The child writes, the supervisor
    reads; a sequence number (odd while a write is under way) lets the reader detect a
    slot caught mid-write and read it again (a seqlock: x86 and ARM keep one thread's
    stores in order for this purpose once they reach memory through the same mapping)."""

    # seq, started (the child's monotonic clock), hard limit (NaN: none, or the clock was
    # stopped: the task is settling), id length, token length, id, token (UTF-8)
    _LAYOUT = struct.Struct("<QddHH256s64s")
    _SEQ = struct.Struct("<Q")
    _SIZE = 352  # _LAYOUT.size rounded up to 8 bytes

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._map = mmap.mmap(-1, max(mmap.PAGESIZE, threads * self._SIZE))
        self._seq = [0] * threads  # the writer's own counts (one writer per slot)

    @classmethod
    def fits(cls, delivery: Delivery) -> bool:
        return len(delivery.id.encode()) <= 256 and len(delivery.token.encode()) <= 64

    def _write(self, thread: int, started: float, hard: float, task_id: bytes, token: bytes) -> None:
        offset = thread * self._SIZE
        seq = self._seq[thread] + 1
        self._SEQ.pack_into(self._map, offset, seq)  # odd: being written
        self._LAYOUT.pack_into(
            self._map, offset, seq, started, hard, len(task_id), len(token), task_id, token
        )
        self._seq[thread] = seq + 1
        self._SEQ.pack_into(self._map, offset, seq + 1)

    def set(self, thread: int, delivery: Delivery, started: float, hard: float | None) -> None:
        """(child) ``thread`` runs ``delivery`` since ``started``, with this hard limit."""
        self._write(
            thread, started, math.nan if hard is None else hard, delivery.id.encode(), delivery.token.encode()
        )

    def put(self, thread: int, delivery: Delivery, soft: float | None, hard: float | None) -> bool:
        """(child) ``thread`` runs ``delivery`` from now; False if its id or token doesn't fit."""
        if not self.fits(delivery):
            return False
        self.set(thread, delivery, time.monotonic(), hard)
        return True

    def stop_clock(self, thread: int) -> None:
        """(child) the task in ``thread`` ran; its settle is being retried: no hard limit now."""
        current = self.read(thread)
        if current is not None:
            task_id, token, started, _hard = current
            self._write(thread, started, math.nan, task_id.encode(), token.encode())

    def clear(self, thread: int) -> None:
        """(child) ``thread`` runs nothing."""
        self._write(thread, 0.0, math.nan, b"", b"")

    def read(self, thread: int) -> tuple[str, str, float, float | None] | None:
        """(task id, token, started, hard limit) of what ``thread`` runs, or None."""
        offset = thread * self._SIZE
        for _ in range(100):
            seq, started, hard, id_len, token_len, task_id, token = self._LAYOUT.unpack_from(
                self._map, offset
            )
            if seq % 2 == 0 and self._SEQ.unpack_from(self._map, offset)[0] == seq:
                if not id_len:
                    return None
                limit = None if math.isnan(hard) else hard
                return task_id[:id_len].decode(), token[:token_len].decode(), started, limit
        return None  # being rewritten all along: the next look will see it

    def entries(self) -> list[tuple[str, str, float, float | None]]:
        return [entry for thread in range(self.threads) if (entry := self.read(thread)) is not None]

    def close(self) -> None:
        self._map.close()


class CarryBoard:
    """What each thread of a child runs now, *with its delivery*: for a broker that can't
    list what a process holds (RabbitMQ), where the supervisor would otherwise need every
    task's start line over the pipe to know what a dead child held or what to report in a
    heartbeat. Each thread's slot holds the start line the pipe would carry (the same
    format, decoded only when the supervisor looks, about once a second, or when the child
    died); writing it costs a copy into shared memory instead of two ``write`` calls per
    task and a supervisor woken by each. A seqlock as in :class:`SlotBoard`.

    A slot is ``SLOT`` bytes of an anonymous shared mapping (only the pages written count
    in RSS); a start line that doesn't fit (a message of over about 48 KiB) goes down the
    pipe instead."""

    SLOT = 64 * 1024
    _HEAD = struct.Struct("<QBxxxI")  # seq (odd while written), settling, line length
    _SEQ = struct.Struct("<Q")

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._map = mmap.mmap(-1, threads * self.SLOT)
        self._seq = [0] * threads  # the writer's own counts (one writer per slot)

    def _write(self, thread: int, settling: bool, line: bytes | None) -> None:
        offset = thread * self.SLOT
        seq = self._seq[thread] + 1
        self._SEQ.pack_into(self._map, offset, seq)  # odd: being written
        if line is None:  # only the flag changes: the line stays
            length = self._HEAD.unpack_from(self._map, offset)[2]
        else:
            length = len(line)
            start = offset + self._HEAD.size
            self._map[start : start + length] = line
        self._HEAD.pack_into(self._map, offset, seq, settling, length)
        self._seq[thread] = seq + 1
        self._SEQ.pack_into(self._map, offset, seq + 1)

    def put(self, thread: int, delivery: Delivery, soft: float | None, hard: float | None) -> bool:
        """(child) ``thread`` runs ``delivery`` from now; False if its line doesn't fit."""
        line = _start_line(delivery, soft, hard, thread)
        if len(line) > self.SLOT - self._HEAD.size:
            return False
        self._write(thread, False, line)
        return True

    def stop_clock(self, thread: int) -> None:
        """(child) the task in ``thread`` ran; its settle is being retried: no hard limit now."""
        self._write(thread, True, None)

    def clear(self, thread: int) -> None:
        """(child) ``thread`` runs nothing."""
        self._write(thread, False, b"")

    def read(self, thread: int) -> tuple[bytes, bool] | None:
        """(the start line, whether it is settling) of what ``thread`` runs, or None."""
        offset = thread * self.SLOT
        start = offset + self._HEAD.size
        for _ in range(100):
            seq, settling, length = self._HEAD.unpack_from(self._map, offset)
            if seq % 2:
                continue
            line = self._map[start : start + min(length, self.SLOT - self._HEAD.size)]
            if self._SEQ.unpack_from(self._map, offset)[0] == seq:
                return (line, bool(settling)) if line else None
        return None  # being rewritten all along: the next look will see it

    def close(self) -> None:
        self._map.close()


def parse_start(line: bytes) -> ChildEvent:
    """The start event of a :class:`CarryBoard` slot's line."""
    return _parse(json.loads(line))


class ChildEvent(NamedTuple):  # a tuple: cheap to build, the supervisor makes one per event
    kind: str  # start | settling | end | retire | token
    task_id: str = ""
    token: str = ""
    load: Callable[[], Delivery] | None = None  # start: decodes the delivery when called
    soft: float | None = None
    hard: float | None = None
    thread: int = 0
    why: str = ""
    started: float | None = None  # start: the child's time.monotonic() at the claim
    request: int = 0  # token: the child's request id (task_id holds the task name)
    rate: float = 0.0  # token: the task's rate limit, per second

    @property
    def key(self) -> tuple[str, str]:
        return (self.task_id, self.token)

    @property
    def delivery(self) -> Delivery | None:
        return self.load() if self.load is not None else None


class EventWriter:
    """The child's end: thread-safe, blocking writes of whole lines.

    With a ``board`` (a :class:`SlotBoard`, or a :class:`CarryBoard` where the supervisor
    can't ask the broker for a process's deliveries), deliveries are written there instead,
    except those that need the pipe (a hard limit under ``PIPE_UNDER``, an id or a message
    too long for a slot); ``tally`` counts every finished task either way."""

    def __init__(
        self, fd: int, tally: Tally | None = None, board: SlotBoard | CarryBoard | None = None
    ) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._tally = tally
        self._board = board
        self._reported: set[tuple[str, str]] = set()  # with a board: the ones sent down the pipe
        self._slot_of: dict[tuple[str, str], int] = {}  # with a board: the others' slots

    def _send(self, data: bytes) -> None:
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]

    def _start(self, delivery: Delivery, soft: float | None, hard: float | None, thread: int) -> bytes:
        board = self._board
        if board is None:
            return _start_line(delivery, soft, hard, thread)
        key = (delivery.id, delivery.token)
        if (hard is not None and hard < PIPE_UNDER) or not board.put(thread, delivery, soft, hard):
            board.clear(thread)
            self._reported.add(key)
            return _start_line(delivery, soft, hard, thread)
        self._slot_of[key] = thread
        return b""

    def _end(self, delivery: Delivery, then_thread: int | None = None) -> bytes:
        if self._tally is not None:
            self._tally.add()
        board = self._board
        if board is None:
            return _end_line(delivery)
        key = (delivery.id, delivery.token)
        thread = self._slot_of.pop(key, None)
        if thread is not None and thread != then_thread:  # (a next task overwrites its slot)
            board.clear(thread)
        if key not in self._reported:
            return b""
        self._reported.discard(key)
        return _end_line(delivery)

    def start(self, delivery: Delivery, soft: float | None, hard: float | None, thread: int = 0) -> None:
        if line := self._start(delivery, soft, hard, thread):
            self._send(line)

    def settling(self, delivery: Delivery) -> None:
        key = (delivery.id, delivery.token)
        if self._board is not None and key not in self._reported:
            thread = self._slot_of.get(key)
            if thread is not None:
                self._board.stop_clock(thread)
            return
        self._send(_line(["g", delivery.id, delivery.token]))

    def end(self, delivery: Delivery) -> None:
        if line := self._end(delivery):
            self._send(line)

    def end_and_start(
        self, done: Delivery, nxt: Delivery, soft: float | None, hard: float | None, thread: int = 0
    ) -> None:
        """Both in one write: the supervisor never sees a moment with the next task unknown."""
        if lines := self._end(done, thread) + self._start(nxt, soft, hard, thread):
            self._send(lines)

    def retire(self, why: str) -> None:
        self._send(_line(["r", why]))

    def token(self, request: int, name: str, per_second: float) -> None:
        self._send(_line(["t", request, name, per_second]))


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
    if kind == "t":
        return ChildEvent("token", fields[2], request=fields[1], rate=fields[3])
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
