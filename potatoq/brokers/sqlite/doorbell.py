"""The doorbell: how a commit wakes the threads waiting on the same SQLite file at once.

SQLite has no notifications, and ``PRAGMA data_version`` changes on *any* commit, so a
waiter that only polls it either answers late or turns into a polling loop on a busy
database. Instead, each waiting thread owns a Unix datagram socket in Linux's abstract
namespace (no file to clean up, no path length limit), announced by a marker file in
``<database>-potatoq-wake/`` that lists the queues it waits on, after a first byte that
says whether it waits right now (both processes map the file: setting it costs no system
call). After a committed write, potatoq sends an empty datagram to each waiting socket
whose queues the write concerns (an enqueue: the messages' queues; a claim or a
heartbeat: none; anything else: all), so a busy thread costs an enqueue nothing. A
waiter sleeps in ``select()`` on its socket: it wakes for potatoq's commits to its queues
(then reads data_version and peeks, as before), not for other queues' or other programs'
writes, which its slow fallback poll still sees.

Ringing is best effort, never an error: a full socket buffer already holds a ring, a
refused send means the waiter's process is gone (its marker is removed then), and a
missed ring costs latency up to the fallback poll, not a lost task. Processes in
another network namespace (containers sharing the file) don't hear each other's rings
and fall back to polling. Only on Linux; elsewhere :func:`supported` is False and
waiters poll as before.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Collection

__all__ = ["Doorbell", "Listener", "supported"]

# A cached directory listing is trusted only once the directory's last change is this old:
# file times have a coarse (jiffy) resolution, so a marker made in the same tick as the
# listing could leave the time unchanged.
LISTING_SETTLE_NS = 100_000_000


def supported() -> bool:
    return sys.platform.startswith("linux")


class Listener:
    """One waiting thread's socket; :meth:`wait` sleeps until a ring or the timeout."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.token = f"{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}"
        self.address = _address(self.token)
        self.queues: tuple[str, ...] | None = None  # announced (None: not yet)
        self.marker: str | None = None
        self._map: mmap.mmap | None = None  # the marker's first byte: 1 while waiting
        self._generation = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind(self.address)
            self.sock.setblocking(False)
            os.makedirs(directory, exist_ok=True)
        except BaseException:
            self.sock.close()
            raise

    def announce(self, queues: tuple[str, ...]) -> None:
        """Publish the queues this thread waits on (a new marker: the directory changes, so
        ringers list it again; the old one goes after the new one exists)."""
        if queues == self.queues:
            return
        self._generation += 1
        name = f"{self.token}~{self._generation}"
        marker = os.path.join(self.directory, name)
        draft = os.path.join(self.directory, f".{name}")  # ringers skip dot names
        with open(draft, "x+b") as out:
            out.write(b"\0" + "\n".join(queues).encode())
            out.flush()
            mapped = mmap.mmap(out.fileno(), 1)
        os.rename(draft, marker)  # whole, or not there: a ringer never reads half a list
        if self.marker is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.marker)
        if self._map is not None:
            self._map.close()
        self.marker, self.queues, self._map = marker, queues, mapped

    def listening(self, waiting: bool) -> None:
        """Say whether this thread waits now (set before its last look for work, so a
        commit after that look sees it and rings)."""
        if self._map is not None:
            self._map[0] = 1 if waiting else 0

    def drain(self) -> None:
        """Forget rings that came while this thread wasn't waiting."""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while True:
                self.sock.recv(16)

    def wait(self, seconds: float) -> bool:
        """Sleep until a ring or ``seconds``; True if rung."""
        readable, _, _ = select.select([self.sock], [], [], seconds)
        if readable:
            self.drain()
            return True
        return False

    def ring_self(self) -> None:
        """Wake this listener from its own process (interrupt())."""
        with contextlib.suppress(OSError):  # full (already rung), or closed
            self.sock.sendto(b"", self.address)

    def close(self) -> None:
        if self.marker is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.marker)
        if self._map is not None:
            self._map.close()
        self.sock.close()


class Doorbell:
    """Rings every listener announced next to one database file."""

    def __init__(self, database: str) -> None:
        self.directory = f"{database}-potatoq-wake"
        self._lock = threading.Lock()
        self._pid = 0
        self._sock: socket.socket | None = None
        self._listeners: dict[str, Announced] = {}  # by marker name
        self._listed_mtime = -1
        self._listed_at = 0

    def listener(self) -> Listener:
        return Listener(self.directory)

    def ring(self, queues: Collection[str] | None = None, skip: str | None = None) -> None:
        """Wake the waiters on ``queues`` (None: every waiter) of this database; ``skip``: a
        token not to ring (the caller's own)."""
        try:
            changed = os.stat(self.directory).st_mtime_ns
        except OSError:
            return  # nobody has waited on this database yet
        with self._lock:
            if self._pid != os.getpid():  # a socket inherited through fork() stays the parent's
                self._pid, self._sock = os.getpid(), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.setblocking(False)
                self._listed_mtime = -1
            if changed != self._listed_mtime or self._listed_at - changed < LISTING_SETTLE_NS:
                try:
                    self._listeners = self._list(self._listeners)
                except OSError:
                    return
                self._listed_mtime, self._listed_at = changed, time.time_ns()
            listeners, sock = self._listeners, self._sock
        assert sock is not None
        own = f"{skip}~" if skip is not None else "\0"
        for name, (address, waits_on, waiting) in listeners.items():
            if waiting is not None and not waiting[0]:
                continue  # busy: it looks for work before its next wait anyway
            if queues is not None and waits_on is not None and waits_on.isdisjoint(queues):
                continue
            if name.startswith(own):
                continue
            try:
                sock.sendto(b"", address)
            except (BlockingIOError, InterruptedError):
                pass  # its buffer is full: it has rings to read already
            except OSError:  # ConnectionRefusedError: no such socket (its thread closed it)
                if not _alive(name):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(self.directory, name))

    def _list(self, known: dict[str, Announced]) -> dict[str, Announced]:
        """The markers in the directory by name (a marker's list never changes, so the known
        ones aren't read again); new markers of dead processes go. Markers no longer there
        drop out, and their maps close when no ring() uses them any more."""
        listeners = {}
        for name in os.listdir(self.directory):
            if name.startswith("."):
                continue
            entry = known.get(name)
            if entry is None:
                if not _alive(name):  # left by a process that died without closing
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(self.directory, name))
                    continue
                entry = _read_marker(os.path.join(self.directory, name))
            listeners[name] = entry
        return listeners


#: A marker as a ringer sees it: the socket's address, the queues (None: unreadable, rung for
#: every write) and the mapped waiting byte (None: unmappable, always rung).
Announced = tuple[bytes, frozenset[str] | None, mmap.mmap | None]


def _read_marker(path: str) -> Announced:
    address = _address(os.path.basename(path).split("~", 1)[0])
    try:
        with open(path, "rb") as marker:
            content = marker.read()
            waiting = mmap.mmap(marker.fileno(), 1, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # gone, or empty
        return address, None, None
    return address, frozenset(content[1:].decode(errors="replace").split("\n")), waiting


def _address(token: str) -> bytes:
    return b"\0potatoq-wake-" + token.encode()


def _alive(token: str) -> bool:
    """Whether the process that made marker ``token`` (``pid-thread-random~n``) still runs.

    A refused ring with a live process (another network namespace, a closing thread) leaves
    the marker: its owner removes it when it closes.
    """
    try:
        os.kill(int(token.split("-", 1)[0]), 0)
    except ProcessLookupError:
        return False
    except (ValueError, OSError):
        return True
    return True
