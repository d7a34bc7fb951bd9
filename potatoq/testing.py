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
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .brokers.base import Broker, WorkerRef
from .exceptions import PotatoqError

#: Seconds drain waits before its second look at an empty broker (see drain).
QUIET_LOOK = 0.2

if TYPE_CHECKING:
    from .app import Potatoq

__all__ = ["ThreadWorker", "drain"]


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
    quiet = False
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
            quiet = False
            continue
        pending = [s for s in broker.queue_stats() if not queues or s.queue in queues]
        if not any(s.delayed or s.waiting for s in pending):
            # Where stats count ready messages only (RabbitMQ), empty twice, a short wait
            # apart: a message the server already pushed to this process's consumer is in
            # neither the queue's ready count nor the local buffer until it arrives, so one
            # empty look could end a drain early.
            if quiet or broker.capabilities.full_stats:
                # A broker that pushes deliveries (RabbitMQ) stops consuming here: once the
                # drain returns, nothing sent later may wait unrun in this process.
                broker.consume_only([])
                broker.flush_history()  # records this thread holds (issue 31) land before return
                return ran
            quiet = True
            # a pause, not broker.wait(): wait() would start consumers that stay and take
            # pushes meant for other workers after the drain
            time.sleep(QUIET_LOOK)
            continue
        quiet = False
        if time.monotonic() > deadline:
            raise DrainTimeout(f"drain: tasks still waiting after {timeout}s: {pending}")
        forward = getattr(broker, "fast_forward", None)
        if fast_forward and callable(forward):
            forward()
        else:
            broker.wait(names, min(0.5, max(0.0, deadline - time.monotonic())))


class ThreadWorker:
    """An in-process worker on a thread, for tests and examples: claims, runs and settles
    tasks of ``queues`` (all queues when None; paused queues left out, as by a worker)
    until stopped. Works with any broker,
    including ``memory://``::

        with ThreadWorker(app):
            assert add.delay(2, 3).get(timeout=5) == 5
    """

    def __init__(self, app: Potatoq, queues: Sequence[str] | None = None, poll: float = 0.5) -> None:
        self.app = app
        self.queues = list(queues) if queues else None
        self.poll = poll
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ran = 0

    def start(self) -> ThreadWorker:
        self._thread = threading.Thread(target=self._loop, name="potatoq-thread-worker", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.app.broker.interrupt()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> ThreadWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _names(self) -> list[str]:
        if self.queues:
            return self.queues
        known = {s.queue for s in self.app.broker.queue_stats()}
        return sorted(known | {self.app.conf.task_default_queue})

    def _loop(self) -> None:
        from .worker.executor import Executor
        from .worker.pausing import PauseGate

        broker = self.app.broker
        executor = Executor(self.app)
        worker = WorkerRef(node=f"thread-{os.getpid()}-{id(self)}", pid=os.getpid())
        gate = PauseGate(lambda: broker, self.queues)
        while not self._stop.is_set():
            names = gate.claimable(self._names())
            if not names:  # every queue paused (potatoq queues pause)
                self._stop.wait(gate.refresh)
                continue
            delivery = broker.claim(names, worker)
            if delivery is None:
                broker.wait(names, self.poll)
                continue
            broker.settle(delivery, executor.execute(delivery))
            self.ran += 1
