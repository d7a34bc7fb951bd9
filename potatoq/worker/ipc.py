"""What a child tells its supervisor, one JSON object per line over a pipe.

The supervisor has to know which deliveries each child holds, so that it can settle them if
the child dies, enforce hard time limits, extend leases and report running tasks in
heartbeats. Events:

``start``     a delivery was claimed (``d``: ``Delivery.to_json()``, ``soft``/``hard``: limits)
``settling``  the task ran; its settle is being retried (stop the hard-limit clock)
``end``       the delivery was settled (or refused as stale): forget it
``retire``    the child is leaving on its own (``why``: max tasks, memory)

A child writes whole lines under a lock (several threads share one pipe); the supervisor
reads without blocking and keeps an incomplete tail for the next read. A line cut short by
the child's death is dropped: it can only be the last one, and a lost ``end`` just means
the supervisor's settle is refused as stale.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import threading
from typing import Any

from potatoq import serialization
from potatoq.brokers.base import Delivery

__all__ = ["ChildEvent", "EventReader", "EventWriter"]


@dataclasses.dataclass(frozen=True, slots=True)
class ChildEvent:
    kind: str  # start | settling | end | retire
    task_id: str = ""
    token: str = ""
    delivery: Delivery | None = None
    soft: float | None = None
    hard: float | None = None
    thread: int = 0
    why: str = ""


class EventWriter:
    """The child's end: thread-safe, blocking writes of whole lines."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def _send(self, *events: dict[str, Any]) -> None:
        data = b"".join(serialization.dumps(e, where="worker event").encode() + b"\n" for e in events)
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]

    def start(self, delivery: Delivery, soft: float | None, hard: float | None, thread: int = 0) -> None:
        self._send({"e": "start", "d": delivery.to_json(), "soft": soft, "hard": hard, "th": thread})

    def settling(self, delivery: Delivery) -> None:
        self._send({"e": "settling", "id": delivery.id, "tok": delivery.token})

    def end(self, delivery: Delivery) -> None:
        self._send({"e": "end", "id": delivery.id, "tok": delivery.token})

    def end_and_start(
        self, done: Delivery, nxt: Delivery, soft: float | None, hard: float | None, thread: int = 0
    ) -> None:
        """Both in one write: the supervisor never sees a moment with the next task unknown."""
        self._send(
            {"e": "end", "id": done.id, "tok": done.token},
            {"e": "start", "d": nxt.to_json(), "soft": soft, "hard": hard, "th": thread},
        )

    def retire(self, why: str) -> None:
        self._send({"e": "retire", "why": why})


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
                chunk = os.read(self.fd, 65536)
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
        *lines, self._tail = data.split(b"\n")
        return [_parse(line) for line in lines if line], eof


def _parse(line: bytes) -> ChildEvent:
    body = serialization.loads(line)
    kind = body["e"]
    if kind == "start":
        delivery = Delivery.from_json(body["d"])
        return ChildEvent(
            kind, delivery.id, delivery.token, delivery, body.get("soft"), body.get("hard"), body.get("th", 0)
        )
    if kind == "retire":
        return ChildEvent(kind, why=body.get("why", ""))
    return ChildEvent(kind, body["id"], body["tok"])
