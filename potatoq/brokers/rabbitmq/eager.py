"""Frames leave on the call that writes them, not after a poll for writability.

pika's plaintext transport buffers every frame and asks its poller to report the socket
writable: two ``epoll_ctl`` calls (watch, unwatch), a poll that returns at once and the
dispatch of that event through pika's Python, all before the ``send``. A busy worker
writes one frame per task (its ack) onto a socket whose buffer is almost always empty, so
that detour was paid on every task for nothing.

:func:`send_eagerly` replaces the transport's ``write`` with one that sends at once when
nothing is buffered ahead of it, and hands pika only what the kernel did not take (a full
socket buffer, an error): pika then buffers it and watches for writability as before, so
ordering, back-pressure and error handling stay pika's. Only the thread driving the
connection writes (see :mod:`.baton`), as before. TLS connections keep pika's path: their
transport does its own buffering around the TLS engine.
"""

from __future__ import annotations

from typing import Any

from pika.adapters.utils import io_services_utils

_Plaintext: Any = getattr(io_services_utils, "_AsyncPlaintextTransport", None)
# The attributes read below are pika's own: fail at import, not with frames sent out of
# order or lost, if a pika release renamed them.
if _Plaintext is None or not isinstance(getattr(_Plaintext, "_STATE_ACTIVE", None), int):  # pragma: no cover
    raise ImportError("this pika release's plaintext transport is not the one potatoq knows")


def send_eagerly(connection: Any) -> bool:
    """Make ``connection``'s transport send each write at once when it can. True if it
    did (a plaintext transport), False if it left pika's own path (TLS, none yet)."""
    transport: Any = getattr(connection, "_transport", None)
    if type(transport) is not _Plaintext:
        return False
    for name in ("_sock", "_tx_buffers", "_state", "write"):
        if not hasattr(transport, name):  # pragma: no cover - see the import check
            return False
    buffered_write = transport.write
    active = transport._STATE_ACTIVE
    sock = transport._sock
    pending = transport._tx_buffers

    def write(data: bytes) -> None:
        if not pending and transport._state == active:
            try:
                sent = sock.send(data)
            except OSError:
                # A full socket buffer, or a broken connection: pika's path sends it later,
                # or meets the same error and aborts the transport as it always does.
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        buffered_write(data)

    transport.write = write
    return True
