"""``-P solo``: run tasks in the worker's own process, one at a time (debugger-friendly).

No fork: a breakpoint in a task stops the worker's main thread where you can reach it. The
broker chores (heartbeat, recovery, leases, periodic tasks) run in a background thread.
The soft time limit works as in a child; the hard limit is not enforced (there is no
supervisor to kill the process), and a crash of the process is recovered by other workers
once its heartbeat is older than ``worker_dead_after``.

SIGTERM or a first SIGINT stops claiming and lets the running task finish; a second SIGINT
interrupts the task (KeyboardInterrupt) and puts it back in the queue.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

from potatoq import signals
from potatoq.brokers.base import Requeue, WorkerRef

from .child import ChildRunner
from .chores import Chores
from .options import WorkerOptions
from .running import RunningTable, TableReporter
from .unrun import UnrunClaims

__all__ = ["SoloWorker"]

logger = logging.getLogger("potatoq.worker.solo")


class SoloWorker:
    def __init__(self, app: Any, options: WorkerOptions) -> None:
        self.app = app
        self.options = options
        self.table = RunningTable()
        self.chores = Chores(
            app,
            options,
            self.table.items,
            processed=lambda: self.table.finished,
            orphans=self._requeue_unrun,
        )
        self._unrun = UnrunClaims(options.dead_after)
        self._stop_chores = threading.Event()
        self.interrupts = 0
        self.runner: ChildRunner | None = None

    def _requeue_unrun(self) -> None:
        """Requeue this process's claims that it doesn't run: their reply was lost (see
        :mod:`.unrun`). Run by the chores with every recovery round."""
        broker = self.app.broker
        if broker.capabilities.leases or not broker.capabilities.lists_holders:
            return
        claims = broker.held_by(WorkerRef(self.options.node, os.getpid()))
        running = {item.key for item in self.table.items()}
        self._unrun.requeue(claims, running, self.chores.settle_later)

    def _chores_loop(self) -> None:
        import time

        while not self._stop_chores.is_set():
            next_due = self.chores.run_due()
            self._stop_chores.wait(max(0.05, min(1.0, next_due - time.monotonic())))

    def run(self) -> int:
        from .executor import Executor

        finalize = getattr(self.app, "finalize", None)
        if finalize is not None:
            finalize()
        signals.worker_init.send(sender=self.app, options=self.options)
        signals.worker_process_init.send(sender=self.app)
        runner = ChildRunner(
            self.app, self.options, TableReporter(self.table, os.getpid()), Executor(self.app)
        )
        self.runner = runner

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if signum == signal.SIGINT:
                self.interrupts += 1
                if self.interrupts >= 2:
                    raise KeyboardInterrupt
            if not runner.stopping.is_set():
                logger.warning("worker %s shutting down (%s)", self.options.node, signal.Signals(signum).name)
            runner.request_stop()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        chores = threading.Thread(target=self._chores_loop, name="potatoq-chores", daemon=True)
        chores.start()
        logger.info("worker %s ready (solo), queues %s", self.options.node, ",".join(self.options.queues))
        signals.worker_ready.send(sender=self.app, node=self.options.node)
        try:
            runner.run()
        except KeyboardInterrupt:
            logger.warning("worker %s interrupted: requeueing the running task", self.options.node)
        finally:
            self._stop_chores.set()
            chores.join(timeout=30)
            for item in self.table.pop_all():
                self.chores.settle_later(item.delivery, Requeue(crashed=False))
            self.chores.flush(timeout=min(10.0, max(2.0, self.options.shutdown_timeout)))
            self.chores.forget()
            signals.worker_process_shutdown.send(sender=self.app, pid=os.getpid(), exitcode=0)
            signals.worker_shutdown.send(sender=self.app, node=self.options.node)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return 0
