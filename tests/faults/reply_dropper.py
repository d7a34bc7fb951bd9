"""A TCP proxy in front of a broker server that can lose one reply: the fault of a network
that fails after the server ran a command and before its answer reached the client.

:meth:`ReplyDropper.drop_next_reply` arms it; the next bytes the server sends on any
connection are thrown away and that connection is closed on both sides, so the client sees
a connection error for a command the server did run.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from .harness import free_port


class ReplyDropper:
    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.port = free_port()
        self.dropped = threading.Event()
        self._armed = threading.Lock()
        self._armed_flag = False
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_next_reply(self) -> None:
        with self._armed:
            self._armed_flag = True
            self.dropped.clear()

    def _take_armed(self) -> bool:
        with self._armed:
            armed, self._armed_flag = self._armed_flag, False
            return armed

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while data := source.recv(65536):
                if replies and self._take_armed():
                    self.dropped.set()
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
