"""The doorbell: how a commit wakes the threads waiting on the same SQLite file at once.

SQLite has no notifications, and ``PRAGMA data_version`` changes on *any* commit, so a
waiter that only polls it either answers late or turns into a polling loop on a busy
database. Instead, each waiting thread owns a Unix datagram socket in Linux's abstract
namespace (no file to clean up, no path length limit), announced by an empty marker file
in ``<database>-potatoq-wake/``; after every committed write, potatoq sends an empty
datagram to each announced socket. A waiter sleeps in ``select()`` on its socket: it
wakes for potatoq's commits (then reads data_version and peeks, as before), not for
other programs' writes, which its slow fallback poll still sees.

Ringing is best effort, never an error: a full socket buffer already holds a ring, a
refused send means the waiter's process is gone (its marker is removed then), and a
missed ring costs latency up to the fallback poll, not a lost task. Processes in
another network namespace (containers sharing the file) don't hear each other's rings
and fall back to polling. Only on Linux; elsewhere :func:`supported` is False and
waiters poll as before.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import sys
import threading
import time

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
        self.token = f"{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}"
        self.marker = os.path.join(directory, self.token)
        self.address = _address(self.token)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind(self.address)
            self.sock.setblocking(False)
            os.makedirs(directory, exist_ok=True)
            with open(self.marker, "x"):
                pass
        except BaseException:
            self.sock.close()
            raise

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
        with contextlib.suppress(OSError):
            os.unlink(self.marker)
        self.sock.close()


class Doorbell:
    """Rings every listener announced next to one database file."""

    def __init__(self, database: str) -> None:
        self.directory = f"{database}-potatoq-wake"
        self._lock = threading.Lock()
        self._pid = 0
        self._sock: socket.socket | None = None
        self._names: list[str] = []
        self._listed_mtime = -1
        self._listed_at = 0

    def listener(self) -> Listener:
        return Listener(self.directory)

    def ring(self, skip: str | None = None) -> None:
        """Wake every waiter on this database (``skip``: a token not to ring, the caller's)."""
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
                    self._names = os.listdir(self.directory)
                except OSError:
                    return
                self._listed_mtime, self._listed_at = changed, time.time_ns()
            names, sock = self._names, self._sock
        assert sock is not None
        for name in names:
            if name == skip:
                continue
            try:
                sock.sendto(b"", _address(name))
            except (BlockingIOError, InterruptedError):
                pass  # its buffer is full: it has rings to read already
            except OSError:  # ConnectionRefusedError: no such socket (its thread closed it)
                if not _alive(name):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(self.directory, name))


def _address(token: str) -> bytes:
    return b"\0potatoq-wake-" + token.encode()


def _alive(token: str) -> bool:
    """Whether the process that made marker ``token`` (``pid-thread-random``) still runs.

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
