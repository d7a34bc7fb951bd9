"""A worker child: claim → execute → settle, one task per thread, no prefetch.

Each thread of a child ("slot") holds at most one delivery. An idle slot blocks in
``broker.wait`` and claims when woken; a busy slot that just finished settles and claims
its next task in one call (``settle_and_claim``), so a busy worker pays one broker round trip
per task. Nothing is ever claimed on behalf of a slot that isn't free: a task that waits
in the broker can still be taken by any other idle worker.

Claims rotate over the ``-Q`` queues (each claim starts one queue further along), so a
queue that always has work can't starve the others.

The child tells its supervisor what each thread runs before running it (``ipc``: over a
pipe, or, on brokers that can list a process's claims, in shared memory, the supervisor
asking the broker for the deliveries themselves), so a child that dies mid-task has its
task settled by the supervisor at once, and one past its hard time limit is killed.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any, Protocol

from potatoq import signals
from potatoq.brokers.base import Delivery, Outcome, WorkerRef
from potatoq.exceptions import SoftTimeLimitExceeded

from .ipc import CarryBoard, SharedFlag, SlotBoard, Tally
from .limits import SOFT_LIMIT_CANCEL, SoftLimits
from .options import WorkerOptions
from .pausing import PauseGate
from .procinfo import rss_kib
from .settling import Backoff, connection_errors, describe, log_stale, settle_reliably

__all__ = ["ChildRunner", "QueueRotation", "Reporter", "child_main"]

logger = logging.getLogger("potatoq.worker.child")


class Reporter(Protocol):
    """Where a child announces the deliveries it holds (a pipe, or a table in solo mode)."""

    def start(self, delivery: Delivery, soft: float | None, hard: float | None, thread: int = 0) -> None: ...
    def settling(self, delivery: Delivery) -> None: ...
    def end(self, delivery: Delivery) -> None: ...
    def end_and_start(
        self, done: Delivery, nxt: Delivery, soft: float | None, hard: float | None, thread: int = 0
    ) -> None: ...
    def retire(self, why: str) -> None: ...


class QueueRotation:
    """The queue order for each claim: starts one queue further along every time."""

    def __init__(self, queues: Sequence[str]) -> None:
        self.queues = tuple(queues)
        self._next = 0
        self._lock = threading.Lock()

    def __call__(self) -> tuple[str, ...]:
        if len(self.queues) < 2:
            return self.queues
        with self._lock:
            start, self._next = self._next, (self._next + 1) % len(self.queues)
        return self.queues[start:] + self.queues[:start]


class ChildRunner:
    """Runs the slots of one child process until asked to stop or retired."""

    def __init__(self, app: Any, options: WorkerOptions, reporter: Reporter, executor: Any) -> None:
        self.app = app
        self.options = options
        self.reporter = reporter
        self.executor = executor
        self.stopping = threading.Event()
        self.limits = SoftLimits()
        self.rotation = QueueRotation(options.queues)
        self.gate = PauseGate(lambda: self.broker, options.queues)
        self.worker = WorkerRef(options.node, os.getpid())
        self._count_lock = threading.Lock()
        self.tasks_run = 0
        self.retired: str | None = None

    @property
    def broker(self) -> Any:
        return self.app.broker

    # -- control ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming; running tasks finish and are settled. Safe from a signal handler."""
        self.stopping.set()
        with contextlib.suppress(Exception):  # best effort: slots re-check within idle_wait anyway
            self.broker.interrupt()

    def _retire(self, why: str) -> None:
        if self.retired is None:
            self.retired = why
            logger.info("child %d retiring: %s", os.getpid(), why)
            with contextlib.suppress(OSError):
                self.reporter.retire(why)
        self.request_stop()

    def run(self) -> None:
        """Run every slot; return when all are stopped."""
        try:
            # A broker that pushes deliveries (RabbitMQ) sizes its prefetch by the slots.
            self.broker.serve_slots(self.options.threads)
        except Exception:
            logger.exception("can't tell the broker this process runs %d tasks at once", self.options.threads)
        if self.options.threads == 1:
            self._slot(0)
            return
        threads = [
            threading.Thread(target=self._slot, args=(i,), name=f"potatoq-slot-{i}", daemon=True)
            for i in range(self.options.threads)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():  # join in steps so that signal handlers run
                thread.join(0.5)
        self.limits.close()

    # -- one slot ----------------------------------------------------------------------------

    def _history_out(self) -> None:
        """Write the task-history records this slot's thread holds (when it stops, or every
        queue is paused; the broker's wait does it when idle: see brokers.history_buffer)."""
        try:
            self.broker.flush_history()
        except Exception:  # the records are kept for a later try; the tasks are settled
            logger.warning("task history: held records not written yet", exc_info=True)

    def _slot(self, index: int) -> None:
        delivery: Delivery | None = None
        limits: tuple[float | None, float | None] = (None, None)
        backoff = Backoff(cap=5.0)
        unreachable_since: float | None = None  # an outage is logged once, not at every retry
        looked = False  # the last settle claimed too, and found nothing
        while True:
            if delivery is None:
                if self.stopping.is_set():
                    self._history_out()
                    return
                try:
                    queues = self.gate.claimable(self.rotation())
                    if not queues:  # every queue of this worker is paused
                        self._history_out()
                        self.stopping.wait(self.gate.refresh)
                        continue
                    if looked:
                        # A claim now would find nothing too (a busy RabbitMQ worker's usual
                        # case: its next task is pushed once RabbitMQ has the ack). Wait for
                        # work first (work already ready returns at once), for at most the
                        # paused set's refresh: an empty claim and a fresh read of the
                        # paused set (a result-store round trip on RabbitMQ) before every
                        # task cost more than the wait. Still nothing: the usual idle below.
                        looked = False
                        self.broker.wait(queues, min(self.gate.refresh, self.options.idle_wait))
                    delivery = self.broker.claim(queues, self.worker)
                    if unreachable_since is not None:
                        logger.info(
                            "claims work again: the broker was unreachable for %.1fs",
                            time.monotonic() - unreachable_since,
                        )
                        unreachable_since = None
                    if delivery is None:
                        self._idle()
                        continue
                    backoff.reset()
                except connection_errors(self.broker) as exc:
                    delay = backoff()
                    if unreachable_since is None:
                        unreachable_since = time.monotonic()
                        logger.warning(
                            "claim failed: the broker is unreachable (%r); retrying with backoff "
                            "(%.1fs doubling to %.0fs)",
                            exc,
                            delay,
                            backoff.cap,
                        )
                    else:
                        logger.debug("claim failed again (%r); retrying in %.1fs", exc, delay)
                    self.stopping.wait(delay)
                    continue
                except Exception:
                    # A broker bug (what it read from storage it couldn't handle) must not take
                    # the child, and every task it could run next, down with it.
                    delay = backoff()
                    logger.exception("claim failed; retrying in %.1fs", delay)
                    self.stopping.wait(delay)
                    continue
                limits = self._limits(delivery)
                self.reporter.start(delivery, *limits, thread=index)
            if self._wait_for_rate(delivery):
                self.reporter.start(delivery, *limits, thread=index)  # its time limits count from now
            outcome = self._execute(delivery, limits[0])
            self._count_task()
            delivery, limits, looked = self._settle(delivery, outcome, index)

    def _idle(self) -> None:
        """Wait for work on the claimable queues (if every one is paused, for the next look).

        The paused set is re-read first: the block may last a minute (Redis), and a pause
        that came in the last refresh interval must be seen before it, not after."""
        queues = self.gate.claimable(self.options.queues, fresh=True)
        if not queues:
            self.stopping.wait(self.gate.refresh)
            return
        timeout = self.options.idle_wait
        if self.broker.capabilities.interruptible_wait and len(queues) == len(self.options.queues):
            # A long block only while nothing is paused: a resumed queue has no wake-up of
            # its own, so a waiter that left it out looks again within idle_wait.
            timeout = self.options.idle_wait_interruptible
        self.broker.wait(queues, timeout)

    def _limits(self, delivery: Delivery) -> tuple[float | None, float | None]:
        try:
            soft, hard = self.executor.time_limits(delivery)
        except Exception:
            logger.exception("can't read the time limits of %s; using none", describe(delivery))
            return None, None
        return soft, hard

    def _wait_for_rate(self, delivery: Delivery) -> bool:
        """Wait for the task's rate-limit token, outside its time limits (as Celery, which
        holds a rate-limited task back before it reaches a pool process). The delivery was
        reported already, so its lease is extended meanwhile and a crash still settles it."""
        try:
            # the hard-limit clock stops while it waits (as while a settle is retried)
            waited: bool = self.executor.wait_for_rate(delivery, lambda: self.reporter.settling(delivery))
        except Exception:
            logger.exception("can't apply the rate limit of %s; running it now", describe(delivery))
            return False
        return waited

    def _execute(self, delivery: Delivery, soft: float | None) -> Outcome:
        started = time.perf_counter()
        if logger.isEnabledFor(logging.DEBUG):  # describe() isn't free, and this runs per task
            logger.debug("%s starting (delivery %d)", describe(delivery), delivery.deliveries)
        outcome: Outcome | None = None
        try:
            with self.limits.guard(soft):
                outcome = self.executor.execute(delivery)
        except SoftTimeLimitExceeded as exc:
            # Raised between the task's end and the guard's exit; if the executor had no
            # outcome yet, the task hit its soft limit outside its own code.
            if outcome is None:
                outcome = self.executor.lost_outcome(delivery, exc)
        except Exception as exc:  # the executor promises not to raise; keep the slot alive anyway
            logger.exception("executor failed on %s", describe(delivery))
            outcome = self.executor.lost_outcome(delivery, exc)
        except BaseException as exc:
            if not _cancelled(exc):
                raise
            if outcome is None:  # an async task cancelled at its soft limit
                reason = str(exc) or "cancelled"
                failure = SoftTimeLimitExceeded(
                    f"soft time limit ({soft:g}s) exceeded" if reason == SOFT_LIMIT_CANCEL else reason
                )
                outcome = self.executor.lost_outcome(delivery, failure)
        assert outcome is not None
        _log_outcome(delivery, outcome, time.perf_counter() - started)
        return outcome

    def _count_task(self) -> None:
        with self._count_lock:
            self.tasks_run += 1
            count = self.tasks_run
        limit = self.options.max_tasks_per_child
        if limit and count >= limit:
            self._retire(f"ran {count} tasks (worker_max_tasks_per_child={limit})")
            return
        max_memory = self.options.max_memory_per_child
        if max_memory:
            used = rss_kib()
            if used > max_memory:
                self._retire(f"uses {used} KiB (worker_max_memory_per_child={max_memory} KiB)")

    def _settle(
        self, delivery: Delivery, outcome: Outcome, index: int
    ) -> tuple[Delivery | None, tuple[float | None, float | None], bool]:
        """Settle ``delivery``; return the next delivery when the same call claimed one, its
        time limits, and whether the call claimed and found nothing."""
        queues = self.gate.claimable(self.rotation())
        if queues and not self.stopping.is_set():
            try:
                applied, nxt = self.broker.settle_and_claim(delivery, outcome, queues, self.worker)
            except Exception:
                logger.debug(
                    "settle_and_claim of %s failed; settling alone", describe(delivery), exc_info=True
                )
            else:
                if not applied:
                    log_stale(delivery, outcome)
                if nxt is None:
                    self.reporter.end(delivery)
                    return None, (None, None), True
                limits = self._limits(nxt)
                self.reporter.end_and_start(delivery, nxt, *limits, thread=index)
                return nxt, limits, False
        settle_reliably(self.broker, delivery, outcome, on_retry=lambda: self.reporter.settling(delivery))
        self.reporter.end(delivery)
        return None, (None, None), False


def _cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is asyncio's ``CancelledError`` (asyncio isn't imported to ask: a
    process that never ran a coroutine never loaded it, and can't have raised it)."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


def _log_outcome(delivery: Delivery, outcome: Outcome, seconds: float) -> None:
    result = getattr(outcome, "result", None)
    state = result.state if result is not None else type(outcome).__name__
    if type(outcome).__name__ == "DeadLetter":
        logger.error(
            "%s dead-lettered in %.3fs: %s", describe(delivery), seconds, getattr(outcome, "reason", "")
        )
    # A failure that isn't dead-lettered is an expected one (the task's throws=): the
    # executor logged it at INFO, and like Celery nothing about it goes out at ERROR.
    elif logger.isEnabledFor(logging.DEBUG):  # the executor logs each run at INFO with its value
        logger.debug("%s %s in %.3fs", describe(delivery), state, seconds)


# ----------------------------------------------------------------------------- the process


def child_main(
    app: Any,
    options: WorkerOptions,
    write_fd: int,
    inherited_fds: Sequence[int],
    index: int = 1,
    tally: Tally | None = None,
    board: SlotBoard | CarryBoard | None = None,
    grants_fd: int | None = None,
    terminating: SharedFlag | None = None,
) -> None:
    """The body of a forked child; never returns (``os._exit``).

    ``grants_fd``: where the supervisor grants rate-limit tokens (``ratelimit``);
    ``terminating``: set by the supervisor before it signals ``revoke(terminate=True)``.
    """
    code = 0
    try:
        import multiprocessing

        # %(processName)s in log lines: "Worker-2" instead of the inherited "MainProcess"
        multiprocessing.current_process().name = f"Worker-{index}"
        signal.set_wakeup_fd(-1)  # the supervisor's wake-up pipe is not ours
        for fd in inherited_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the supervisor decides
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        from .executor import Executor
        from .ipc import EventWriter
        from .ratelimit import NodeRateLimiter

        signals.worker_process_init.send(sender=app)
        writer = EventWriter(write_fd, tally, board)
        limiter = NodeRateLimiter(writer.token, grants_fd) if grants_fd is not None else None
        runner = ChildRunner(app, options, writer, Executor(app, rate_limiter=limiter))

        def on_term(signum: int, frame: FrameType | None) -> None:
            if terminating is not None and terminating.is_set():
                # revoke(terminate=True): die of the signal, as a Celery pool process does
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                return
            runner.request_stop()

        signal.signal(signal.SIGTERM, on_term)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # blocked by the supervisor's fork
        gc.collect()  # only what was made since the fork: the inherited heap is frozen
        gc.freeze()  # what worker_process_init set up stays, as the supervisor's state does
        runner.run()
    except BaseException:
        logger.exception("worker child %d crashed", os.getpid())
        code = 1
    finally:
        try:
            signals.worker_process_shutdown.send(sender=app, pid=os.getpid(), exitcode=code)
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code)
