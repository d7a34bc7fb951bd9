"""Helpers for users' tests: run everything queued, in this process.

``broker="memory://"`` keeps tasks in memory; :func:`drain` runs them (and everything they
lead to: retries, chain steps, chord callbacks) until nothing is left::

    app = Potatoq("proj", broker="memory://")
    r = add.delay(2, 3)
    drain(app)
    assert r.get() == 5
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .brokers.base import Broker, WorkerRef
from .exceptions import PotatoqError

if TYPE_CHECKING:
    from .app import Potatoq

__all__ = ["drain"]


class DrainTimeout(PotatoqError):
    """``drain`` still had work after its timeout."""


def drain(
    app: Potatoq,
    *,
    queues: Sequence[str] | None = None,
    broker: Broker | None = None,
    timeout: float = 30.0,
    fast_forward: bool = True,
    always_store_results: bool = False,
) -> int:
    """Run every queued task of ``app`` (or of ``queues``) until none is left.

    With ``fast_forward`` (the default) tasks due later (countdown, eta, retry backoff) run
    at once, on brokers that can do that (``memory://``); otherwise drain waits for them.
    Returns how many deliveries ran.
    """
    from .worker.executor import Executor

    broker = broker or app.broker
    executor = Executor(
        app, broker=broker if broker is not app.broker else None, always_store_results=always_store_results
    )
    worker = WorkerRef(node=f"drain-{os.getpid()}", pid=os.getpid())
    deadline = time.monotonic() + timeout
    ran = 0
    while True:
        names = (
            list(queues)
            if queues
            else sorted({s.queue for s in broker.queue_stats()} | {app.conf.task_default_queue})
        )
        delivery = broker.claim(names, worker)
        if delivery is not None:
            outcome = executor.execute(delivery)
            broker.settle(delivery, outcome)
            ran += 1
            continue
        pending = [s for s in broker.queue_stats() if not queues or s.queue in queues]
        if not any(s.delayed or s.waiting for s in pending):
            return ran
        if time.monotonic() > deadline:
            raise DrainTimeout(f"drain: tasks still waiting after {timeout}s: {pending}")
        forward = getattr(broker, "fast_forward", None)
        if fast_forward and callable(forward):
            forward()
        else:
            broker.wait(names, min(0.5, max(0.0, deadline - time.monotonic())))
