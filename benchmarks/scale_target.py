"""What ``benchmarks.scale`` needs from each broker it measures (one module per broker)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from potatoq.brokers.base import Broker, WorkerRef
from potatoq.message import Message, new_id

WORKER = WorkerRef("bench-scale", os.getpid())

# (ready, delayed, results) to add -> (bytes the waiting tasks added, bytes the results added)
Fill = Callable[[int, int, int], tuple[int, int]]


@dataclasses.dataclass
class Target:
    """A broker with a backlog to fill, and what its byte counts measure."""

    broker: Broker
    fill: Fill
    memory: str  # what fill's byte counts are (disk, server memory, queue memory)
    # Rows of broker-specific figures taken after the drain: (figure, value).
    extra: Callable[[], list[tuple[str, str]]] | None = None
    # A second byte count per waiting task, where the broker has two worth showing
    # (RabbitMQ: disk beside memory): (what, bytes per waiting task), set by fill.
    also: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    # What the broker keeps: RabbitMQ has no results (they go to the result backend), and
    # no delayed backlog when the delay cascade is shared with other tasks.
    keeps_results: bool = True
    keeps_delayed: bool = True


def message(queue: str, eta: float | None = None) -> Message:
    return Message(id=new_id(), task="bench.noop", queue=queue, eta=eta)
