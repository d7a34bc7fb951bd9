"""Frames sent on the call that writes them (``potatoq.brokers.rabbitmq.eager``): when the
kernel takes only part of a write, pika's own buffering sends the rest, in order, once the
socket is writable again. On a real socket pair and pika's real transport and ioloop (no
broker needed: this is the transport under the AMQP connection).
"""

from __future__ import annotations

import socket
import threading
import types
from typing import Any

from pika.adapters.select_connection import IOLoop
from pika.adapters.utils.io_services_utils import _AsyncPlaintextTransport
from pika.adapters.utils.selector_ioloop_adapter import SelectorIOServicesAdapter

from potatoq.brokers.rabbitmq.eager import send_eagerly


class _Sink:
    """The protocol side of the transport: nothing comes back on this pair."""

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, error: BaseException | None) -> None:
        pass


def _transport() -> tuple[Any, socket.socket, IOLoop]:
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    loop = IOLoop()
    loop.activate_poller()
    transport = _AsyncPlaintextTransport(ours, _Sink(), SelectorIOServicesAdapter(loop))
    assert send_eagerly(types.SimpleNamespace(_transport=transport))
    return transport, peer, loop


def test_a_write_onto_an_empty_buffer_is_sent_on_the_call() -> None:
    transport, peer, loop = _transport()
    try:
        transport.write(b"frame-1")
        assert transport.get_write_buffer_size() == 0  # nothing left for a writability poll
        assert peer.recv(100) == b"frame-1"
    finally:
        peer.close()
        loop.close()


def test_what_the_kernel_does_not_take_is_sent_later_and_in_order() -> None:
    transport, peer, loop = _transport()
    chunks = [bytes([65 + i % 26]) * 40_000 for i in range(30)]  # 1.2 MB: the socket fills
    expected = b"".join(chunks)
    received = bytearray()

    def read() -> None:
        while len(received) < len(expected):
            data = peer.recv(65536)
            if not data:
                return
            received.extend(data)

    try:
        for chunk in chunks:
            transport.write(chunk)
        assert transport.get_write_buffer_size() > 0  # pika holds the rest
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        for _ in range(100_000):
            if not transport.get_write_buffer_size():
                break
            loop.poll()
            loop.process_timeouts()
        reader.join(30)
        assert bytes(received) == expected
    finally:
        peer.close()
        loop.close()


def test_tls_keeps_pikas_own_path() -> None:
    assert not send_eagerly(types.SimpleNamespace(_transport=object()))
    assert not send_eagerly(types.SimpleNamespace())
