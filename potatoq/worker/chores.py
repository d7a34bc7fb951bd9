"""The supervisor's periodic broker chores: heartbeat, recovery, leases, periodic tasks,
termination requests, and settles kept for later because the broker was unreachable.

Each chore runs when due (:meth:`Chores.run_due` returns when to call it again). A chore
that finds the broker unreachable ends the round: the others would only wait out the same
connection timeout, delaying the supervisor's own work (reaping children, hard limits).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from potatoq.brokers.base import Delivery, Outcome, WorkerInfo

from .options import WorkerOptions
from .running import Running
from .scheduler import Scheduler
from .settling import Backoff, attempt_settle, connection_errors, describe

__all__ = ["Chores", "PendingSettle"]

logger = logging.getLogger("potatoq.worker.supervisor")

LEASE_EXTEND_INTERVAL = 5.0
#: How often running tasks are checked for a ``revoke(terminate=True)`` request.
TERMINATE_CHECK_INTERVAL = 1.0


@dataclasses.dataclass
class PendingSettle:
    delivery: Delivery
    outcome: Outcome
    due: float = 0.0
    backoff: Backoff = dataclasses.field(default_factory=lambda: Backoff(first=0.2, cap=5.0))


class _Unreachable(Exception):
    pass


class Chores:
    def __init__(
        self,
        app: Any,
        options: WorkerOptions,
        running: Callable[[], list[Running]],
        *,
        processed: Callable[[], int] = lambda: 0,
        orphans: Callable[[], None] | None = None,
        terminations: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.options = options
        self.running = running
        self.processed = processed
        self.orphans = orphans  # settles this node's claims held by no live process
        self.terminations = terminations  # signals the tasks revoke(terminate=True) asked to stop
        self.clock = clock
        self.started_at = time.time()
        self.pending: list[PendingSettle] = []
        self.scheduler = Scheduler(app) if options.beat else None
        now = clock()
        self.recover_interval = max(0.5, min(options.heartbeat_interval, options.dead_after / 4))
        # Leases last dead_after; extend well before that (every 5 s by default).
        self.extend_interval = max(0.2, min(LEASE_EXTEND_INTERVAL, options.dead_after / 3))
        self._due = {"heartbeat": now, "recover": now, "extend": now + self.extend_interval, "beat": now}
        if terminations is not None:
            self._due["terminate"] = now
        self._unreachable_since: float | None = None
        self._executor: Any = None  # made when recovery first needs a failure outcome

    @property
    def broker(self) -> Any:
        return self.app.broker

    def settle_later(self, delivery: Delivery, outcome: Outcome) -> None:
        """Settle now if the broker answers, else keep retrying from :meth:`run_due`."""
        applied, outcome = attempt_settle(self.broker, delivery, outcome)
        if applied is None:
            item = PendingSettle(delivery, outcome)
            delay = item.backoff()
            item.due = self.clock() + delay
            logger.warning(
                "settling %s (%s) failed: the broker is unreachable; retrying in %.1fs",
                describe(delivery),
                type(outcome).__name__,
                delay,
            )
            self.pending.append(item)

    def run_due(self) -> float:
        """Run whatever is due; return the monotonic time of the next due chore."""
        now = self.clock()
        try:
            self._settle_pending(now)
            if self._due["heartbeat"] <= now:
                self._guard("heartbeat", self._heartbeat)
                self._due["heartbeat"] = now + self.options.heartbeat_interval
            if self._due["recover"] <= now:
                self._guard("recovery", self._recover)
                if self.orphans is not None and self.broker.capabilities.supervisor_settles:
                    self._guard("settling orphaned claims", self.orphans)
                self._due["recover"] = now + self.recover_interval
            if self._due["extend"] <= now:
                if self.broker.capabilities.leases:
                    self._guard("lease extension", self._extend)
                self._due["extend"] = now + self.extend_interval
            if self.terminations is not None and self._due["terminate"] <= now:
                self._guard("checking for revoked tasks to terminate", self.terminations)
                self._due["terminate"] = now + TERMINATE_CHECK_INTERVAL
            if self.scheduler is not None and self._due["beat"] <= now:
                delay = self._guard("periodic scheduler", self.scheduler.tick)
                self._due["beat"] = now + (delay if isinstance(delay, float) else 1.0)
        except _Unreachable:
            # retry the round soon, but don't spin against a dead broker
            retry_at = self.clock() + 1.0
            for name in self._due:
                self._due[name] = (
                    min(self._due[name], retry_at) if self._due[name] <= now else self._due[name]
                )
            return retry_at
        if self._unreachable_since is not None:
            logger.warning("the broker is reachable again (after %.0fs)", now - self._unreachable_since)
            self._unreachable_since = None
        return self.next_due()

    def next_due(self) -> float:
        due = min(t for name, t in self._due.items() if name != "beat" or self.scheduler is not None)
        if self.pending:
            due = min(due, *(p.due for p in self.pending))
        return due

    def _guard(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except connection_errors(self.broker) as exc:
            if self._unreachable_since is None:
                self._unreachable_since = self.clock()
                logger.warning("%s failed: the broker is unreachable: %r", what, exc)
            raise _Unreachable from exc
        except Exception:
            logger.exception("%s failed", what)
            return None

    # -- the chores --------------------------------------------------------------------------

    def worker_info(self) -> WorkerInfo:
        return WorkerInfo(
            node=self.options.node,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=self.options.queues,
            concurrency=self.options.concurrency,
            started_at=self.started_at,
            running=tuple(r.as_task() for r in self.running()),
            processed=self.processed(),
            registered=tuple(sorted(getattr(self.app, "tasks", {}) or {})),
        )

    def _heartbeat(self) -> None:
        self.broker.heartbeat(self.worker_info())

    def _recover(self) -> None:
        broker = self.broker
        if getattr(broker, "lost_outcome", None) is None:
            broker.lost_outcome = self._lost_outcome
        report = broker.recover(self.options.dead_after, self.options.max_deliveries)
        if report.requeued or report.dead:
            logger.warning(
                "recovered tasks of dead workers: %d requeued, %d dead-lettered", report.requeued, report.dead
            )

    def _lost_outcome(self, delivery: Delivery, exc: BaseException) -> Outcome:
        """What recovery settles a task at its delivery limit with, as the supervisor does
        for one whose process died: FAILURE result, errbacks, chord join, dead letter."""
        if self._executor is None:
            from .executor import Executor

            self._executor = Executor(self.app)
        outcome: Outcome = self._executor.lost_outcome(delivery, exc)
        return outcome

    def _extend(self) -> None:
        deliveries = [r.delivery for r in self.running()]
        if deliveries:
            self.broker.extend(deliveries, self.options.dead_after)

    def _settle_pending(self, now: float) -> None:
        keep: list[PendingSettle] = []
        unreachable = False
        for item in self.pending:
            if unreachable or item.due > now:
                keep.append(item)
                continue
            applied, item.outcome = attempt_settle(self.broker, item.delivery, item.outcome)
            if applied is None:
                unreachable = True
                delay = item.backoff()
                item.due = now + delay
                # settle_later logged the first failure; the round's "unreachable" line covers the rest
                logger.debug(
                    "settling %s (%s) failed again; retrying in %.1fs",
                    describe(item.delivery),
                    type(item.outcome).__name__,
                    delay,
                )
                keep.append(item)
            elif applied:
                logger.info(
                    "settled %s (%s) once the broker answered",
                    describe(item.delivery),
                    type(item.outcome).__name__,
                )
        self.pending = keep
        if unreachable:
            raise _Unreachable

    def flush(self, timeout: float) -> None:
        """At shutdown: keep retrying pending settles for up to ``timeout`` seconds."""
        deadline = self.clock() + timeout
        while self.pending and self.clock() < deadline:
            with contextlib.suppress(_Unreachable):
                self._settle_pending(self.clock())
            if self.pending:
                wake = min(*(p.due for p in self.pending), deadline)
                time.sleep(max(0.0, wake - self.clock()))
        for item in self.pending:
            logger.error(
                "could not settle %s (%s) before exiting: the broker is unreachable; recovery will "
                "redeliver it after worker_dead_after",
                describe(item.delivery),
                type(item.outcome).__name__,
            )

    def forget(self) -> None:
        try:
            self.broker.forget_worker(self.options.node)
        except Exception as exc:  # noqa: BLE001 - the heartbeat record just ages out
            logger.warning("could not remove this worker's heartbeat record: %r", exc)
