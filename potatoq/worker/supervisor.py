"""The prefork supervisor: children, crash recovery, hard time limits, shutdown, recycling.

One single-threaded loop (so ``fork()`` never copies a lock held by another thread) waits
on the children's event pipes and a signal wake-up pipe, and in each turn:

1. reads the children's events (``ipc``): which deliveries each one holds (a read is
   followed by a short pause, so that one wake-up reads the events of many tasks). On a
   broker that lists what one process holds (``held_by``), children write what their
   threads run to a shared board instead (only hard limits under ``ipc.PIPE_UNDER`` use
   the pipe), and the supervisor asks the broker for the deliveries when it needs them:
   a dead child's tasks, lease extensions, the running tasks of a heartbeat;
2. reaps children that exited. Whatever a dead child still held is settled at once:
   ``Requeue(crashed=True)``, or, once the delivery count reached ``task_max_deliveries``,
   the executor's lost outcome (dead letter, FAILURE result with ``WorkerLostError``,
   errbacks, chord join). A child killed at the hard time limit has its task failed with
   ``TimeLimitExceeded`` (not redelivered); its other threads' tasks and the tasks of
   children killed at shutdown go back with ``Requeue(crashed=False)``;
3. kills children whose task passed its hard time limit (SIGKILL: a task stuck in C code
   can't be interrupted any other way), as reported or as on their board;
4. runs the broker chores (``chores``): heartbeat, recovery of dead workers' tasks and of
   this node's claims that no live process holds (a claim a database server committed
   after its child was reaped) or that a live child never got (the claim's reply was lost:
   requeued once no thread ran it for ``worker_dead_after``), lease extension, the periodic
   scheduler, settles kept because the broker was unreachable;
5. replaces exited children (recycled ones, crashed ones) unless shutting down;
6. grants rate-limit tokens (``ratelimit``: one clock per task name for the whole node)
   and, about once a second, signals the children running a task that
   ``revoke(terminate=True)`` asked to stop (``potatoq.terminate``): the signal (SIGTERM
   by default), then SIGKILL after ``TERMINATE_GRACE``; the task is settled REVOKED, its
   child's other threads' tasks go back to the queue uncounted.

Shutdown (SIGTERM or SIGINT): children are told to stop claiming (SIGTERM) and get
``worker_shutdown_timeout`` to finish; then they are killed and their tasks requeued
without counting a crash. A second SIGINT skips the rest of the grace period. Either way
the worker exits 0 and nothing is lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import logging
import os
import select
import selectors
import signal
import sys
import time
from collections import OrderedDict
from types import FrameType
from typing import Any, NamedTuple

from potatoq import signals
from potatoq.brokers.base import Complete, Delivery, Outcome, Requeue, WorkerRef
from potatoq.exceptions import TimeLimitExceeded, WorkerLostError
from potatoq.terminate import termination_requests

from .child import child_main
from .chores import Chores
from .ipc import (
    CarryBoard,
    ChildEvent,
    EventReader,
    SharedFlag,
    SlotBoard,
    Tally,
    parse_start,
    reports_every_task,
    widen_pipe,
)
from .options import WorkerOptions
from .ratelimit import TokenDispenser
from .running import Running, RunningTable
from .settling import connection_errors, describe
from .unrun import UnrunClaims

__all__ = ["Supervisor"]

logger = logging.getLogger("potatoq.worker.supervisor")

# Why the supervisor killed a child; decides what its deliveries become.
KILLED_AT_SHUTDOWN = "shutdown"
KILLED_AT_HARD_LIMIT = "hard time limit"
KILLED_BY_REVOKE = "revoked with terminate=True"

#: After signalling a child for ``revoke(terminate=True)``, SIGKILL it if it is still alive
#: this many seconds later (a task may catch SIGTERM to clean up, or be stuck in C code).
TERMINATE_GRACE = 5.0

#: Tasks running for less than this aren't checked for a termination request yet (the
#: next check, a second later, asks about them).
TERMINATE_MIN_AGE = 0.5

#: After reading children's events, wait this long for more before reading again
#: (signals still wake the supervisor at once).
EVENT_BATCH_WINDOW = 0.02

#: How many exited children the supervisor remembers (why they died), for the claims found
#: under their pid after they were reaped (see ``_settle_orphans``).
REMEMBERED_EXITS = 256

#: On a lease broker, ask ``held_by`` once more for a child this long after it exited: a
#: command it sent before dying that the server ran after the reap shows by then.
RECHECK_AFTER = 0.2


@dataclasses.dataclass(eq=False)
class Child:
    pid: int
    reader: EventReader
    index: int
    started: float = dataclasses.field(default_factory=time.monotonic)
    running: RunningTable = dataclasses.field(default_factory=RunningTable)
    killed: str | None = None  # why we SIGKILLed it
    # hard-limit victims: (task id, token) -> the limit it passed
    victims: dict[tuple[str, str], float] = dataclasses.field(default_factory=dict)
    retired: str | None = None
    ever_ran: bool = False
    tally: Tally = dataclasses.field(default_factory=Tally)  # tasks it finished
    board: SlotBoard | None = None  # what its threads run, when it doesn't report every task
    # ... or, where it does (no held_by), its threads' start lines (see _sync_carried)
    carry: CarryBoard | None = None
    # thread -> (the start line last seen in its carry slot, the task's key)
    carried: dict[int, tuple[bytes, tuple[str, str]]] = dataclasses.field(default_factory=dict)
    grants_fd: int = -1  # where its rate-limit tokens are granted
    terminating: SharedFlag = dataclasses.field(default_factory=SharedFlag)
    # revoke(terminate=True) victims: (task id, token) -> the signal's name
    revoked: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    kill_at: float | None = None  # SIGKILL then, if still alive (after a terminate signal)

    @property
    def finished(self) -> int:
        return self.tally.value


class Supervisor:
    """Runs a prefork (or threads) worker until shutdown; :meth:`run` returns the exit code."""

    def __init__(self, app: Any, options: WorkerOptions) -> None:
        self.app = app
        self.options = options
        self.children: dict[int, Child] = {}
        self.selector = selectors.DefaultSelector()
        self.stopping = False
        self.stop_deadline: float | None = None
        self.interrupts = 0
        self._finished_by_exited = 0  # tasks finished by children that are gone
        # Whether children report every task over the pipe, or use a board (see ipc).
        self.every_task = reports_every_task(app.broker.capabilities)
        self.chores = Chores(
            app,
            options,
            self._running,
            processed=lambda: self.finished,
            orphans=self._settle_orphans,
            terminations=self._terminate_revoked,
        )
        self.tokens = TokenDispenser()
        self._executor: Any = None
        self._signals: list[int] = []
        self._wakeup_r, self._wakeup_w = os.pipe()
        self._quick_failures = 0
        self._respawn_at = 0.0
        # pid -> (the child, how it ended): recently exited children, oldest first
        self._exited: OrderedDict[int, tuple[Child, str]] = OrderedDict()
        self._recheck: dict[int, float] = {}  # pid -> when it exited (lease brokers)
        self._unrun = UnrunClaims(options.dead_after)  # live children's claims no thread runs

    # -- public ----------------------------------------------------------------------------

    @property
    def finished(self) -> int:
        """Tasks the children finished, counted by the children themselves."""
        return self._finished_by_exited + sum(child.finished for child in self.children.values())

    def run(self) -> int:
        finalize = getattr(self.app, "finalize", None)
        if finalize is not None:
            finalize()  # on_after_configure hooks (add_periodic_task …) before the children fork
        self._install_signals()
        self.selector.register(self._wakeup_r, selectors.EVENT_READ, None)
        signals.worker_init.send(sender=self.app, options=self.options)
        logger.info(
            "worker %s starting: %d process%s x %d thread%s, queues %s, broker %r",
            self.options.node,
            self.options.processes,
            "" if self.options.processes == 1 else "es",
            self.options.threads,
            "" if self.options.threads == 1 else "s",
            ",".join(self.options.queues),
            self.app.broker,
        )
        for index in range(1, self.options.processes + 1):
            self._spawn(index)
        signals.worker_ready.send(sender=self.app, node=self.options.node)
        logger.info("worker %s ready", self.options.node)
        try:
            self._loop()
        finally:
            self._finish()
        return 0

    # -- the loop ----------------------------------------------------------------------------

    def _loop(self) -> None:
        next_chores = time.monotonic()
        while True:
            now = time.monotonic()
            timeout = max(0.0, min(self._next_deadline(now, next_chores), now + 1.0) - now)
            heard = False
            for key, _ in self.selector.select(timeout):
                if key.data is None:
                    self._drain_wakeup()
                else:
                    self._read_events(key.data)
                    heard = True
            self._handle_signals()
            self._reap()
            self._sync_boards()
            self._grant_tokens()
            self._enforce_hard_limits()
            self._enforce_terminate_grace()
            next_chores = min(next_chores, self.chores.next_due())  # a settle may have been deferred
            if time.monotonic() >= next_chores:
                next_chores = self.chores.run_due()
            if self.stopping:
                if not self.children:
                    return
                if self.stop_deadline is not None and time.monotonic() >= self.stop_deadline:
                    self._kill_all(KILLED_AT_SHUTDOWN)
            else:
                self._replace_children()
                if heard:
                    self._gather_events()

    def _gather_events(self) -> None:
        """Let the children's events pile up for a moment before the next read.

        A busy child reports every task (an end and a start); waking for each one cost the
        supervisor about 60 us per task, as much as a third of the child's own work. The
        events keep in the pipe meanwhile (a child's start carries its own clock, so the
        hard limit isn't delayed), and a signal (a child's death, a shutdown) still ends
        the pause at once through the wake-up pipe.
        """
        with contextlib.suppress(InterruptedError):
            select.select([self._wakeup_r], [], [], EVENT_BATCH_WINDOW)

    def _next_deadline(self, now: float, next_chores: float) -> float:
        deadline = next_chores
        for child in self.children.values():
            if child.killed is None:
                for limited in _limited(child):
                    deadline = min(deadline, limited.deadline)
            elif child.kill_at is not None:
                deadline = min(deadline, child.kill_at)
        token_due = self.tokens.next_due()
        if token_due is not None:
            deadline = min(deadline, token_due)
        if self.stopping and self.stop_deadline is not None:
            deadline = min(deadline, self.stop_deadline)
        if not self.stopping and len(self.children) < self.options.processes:
            deadline = min(deadline, self._respawn_at)
        return deadline

    # -- children ----------------------------------------------------------------------------

    def _spawn(self, index: int) -> None:
        read_fd, write_fd = os.pipe()
        grants_r, grants_w = os.pipe()
        inherited = [self._wakeup_r, self._wakeup_w, read_fd, grants_w]
        inherited += [child.reader.fd for child in self.children.values()]
        inherited += [child.grants_fd for child in self.children.values()]
        selector_fd = getattr(self.selector, "fileno", None)  # epoll/kqueue selectors own an fd
        if callable(selector_fd):
            inherited.append(selector_fd())
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        # SIGTERM stays blocked in the child until it has its own handler (child_main
        # unblocks it): a shutdown that starts right now must not hit the inherited one.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        tally = Tally()
        board = None if self.every_task else SlotBoard(self.options.threads)
        carry = CarryBoard(self.options.threads) if self.every_task else None
        terminating = SharedFlag()
        # Everything the supervisor made so far (the app, its tasks, the imported libraries)
        # leaves the garbage collector's generations: a child's full collections then scan
        # only what the child itself creates, a fraction of a millisecond instead of about
        # 16 ms here (a pause that lands on whatever task runs), and they no longer write
        # the GC headers of inherited objects, which copied those pages into every child.
        # Collecting first keeps garbage cycles out of the frozen set, where they'd stay for
        # good (the supervisor freezes again at every respawn; after the first time this
        # collection scans only what was made since the last one).
        gc.collect()
        gc.freeze()
        try:
            pid = os.fork()
            if pid == 0:  # the child
                shared = board or carry
                child_main(
                    self.app, self.options, write_fd, inherited, index, tally, shared, grants_r, terminating
                )
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.close(write_fd)
        os.close(grants_r)
        widen_pipe(read_fd)  # a batched read leaves more events in the pipe
        child = Child(
            pid=pid,
            reader=EventReader(read_fd),
            index=index,
            tally=tally,
            board=board,
            carry=carry,
            grants_fd=grants_w,
            terminating=terminating,
        )
        self.children[pid] = child
        self.selector.register(read_fd, selectors.EVENT_READ, child)
        logger.debug("started child %d", pid)

    def _replace_children(self) -> None:
        missing = self.options.processes - len(self.children)
        if missing <= 0 or time.monotonic() < self._respawn_at:
            return
        used = {child.index for child in self.children.values()}
        free = [i for i in range(1, self.options.processes + 1) if i not in used]
        for index in free[:missing]:
            self._spawn(index)

    def _read_events(self, child: Child) -> None:
        events, _eof = child.reader.read()
        # A busy child's batch is mostly tasks that started and ended within it: those
        # need no tracking at all.
        ended = {event.key for event in events if event.kind == "end"}
        for event in events:
            if event.kind == "start" and event.key in ended:
                child.ever_ran = True  # (its end then finds nothing to remove)
            else:
                self._apply(child, event)
        self._sync_carried(child)

    def _sync_carried(self, child: Child) -> None:
        """Bring ``child.running`` up to what its carry board shows (when it has one): a
        slot's new start line is applied as the pipe's start event would be, a slot that
        changed or emptied ends the task it held. Tasks that started and ended between two
        looks are never seen, as within one batch of pipe events."""
        carry = child.carry
        if carry is None:
            return
        for thread in range(carry.threads):
            entry = carry.read(thread)
            seen = child.carried.get(thread)
            if seen is not None and (entry is None or entry[0] != seen[0]):
                child.running.remove(seen[1])
                del child.carried[thread]
                seen = None
            if entry is None:
                continue
            line, settling = entry
            if seen is None:
                try:
                    event = parse_start(line)
                except ValueError:  # can't be (a seqlock-checked copy); never take the loop down
                    logger.exception("child %d: unreadable board slot %d", child.pid, thread)
                    continue
                self._apply(child, event)
                seen = child.carried[thread] = (line, event.key)
            if settling:
                child.running.mark_settling(seen[1])

    def _sync_boards(self) -> None:
        for child in self.children.values():
            self._sync_carried(child)

    def _apply(self, child: Child, event: ChildEvent) -> None:
        if event.kind == "start":
            assert event.load is not None
            child.ever_ran = True
            item = Running((event.task_id, event.token), child.pid, event.soft, event.hard, event.load)
            if event.started is not None:  # the child's clock: a batched read doesn't delay the limit
                item.started = event.started
            # started_at (for humans) is now minus the time the event waited in the pipe
            item.started_at -= max(0.0, time.monotonic() - item.started)
            child.running.add(item)
        elif event.kind == "end":
            child.running.remove((event.task_id, event.token))
        elif event.kind == "settling":
            child.running.mark_settling((event.task_id, event.token))
        elif event.kind == "retire":
            child.retired = event.why
        elif event.kind == "token":
            self.tokens.request(child.pid, event.request, event.task_id, event.rate)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is not None:
                self._on_exit(child, status)

    def _on_exit(self, child: Child, status: int) -> None:
        self._read_events(child)  # whatever it wrote before dying is still in the pipe
        self.selector.unregister(child.reader.fd)
        os.close(child.reader.fd)
        with contextlib.suppress(OSError):
            os.close(child.grants_fd)
        child.terminating.close()
        finished = child.finished
        self._finished_by_exited += finished
        child.tally.close()
        if child.board is not None:
            child.board.close()
        if child.carry is not None:  # (read by _read_events above)
            child.carry.close()
        held = child.running.pop_all()
        held += self._unreported(child, {item.key for item in held})
        how = _describe_status(status)
        self._exited[child.pid] = (child, how)
        while len(self._exited) > REMEMBERED_EXITS:
            self._exited.popitem(last=False)
        if self.app.broker.capabilities.leases:
            self._recheck[child.pid] = time.monotonic()
        if child.killed is None and (held or os.waitstatus_to_exitcode(status) != 0):
            logger.error("child %d %s while running %d task(s)", child.pid, how, len(held))
        else:
            logger.debug("child %d %s", child.pid, how)
        for item in held:
            outcome = self._outcome_for_lost(child, item, how)
            if outcome is not None:
                self.chores.settle_later(item.delivery, outcome)
        # Don't fork-bomb when children die at start (a failing worker_process_init, say).
        lived = time.monotonic() - child.started
        ran = child.ever_ran or finished > 0 or bool(held)  # it got as far as running a task
        if os.waitstatus_to_exitcode(status) != 0 and not ran and lived < 2.0 and not child.killed:
            self._quick_failures += 1
            delay = min(10.0, 0.25 * 2**self._quick_failures)
            self._respawn_at = time.monotonic() + delay
            logger.error("child %d failed at start; starting a new one in %.1fs", child.pid, delay)
        else:
            self._quick_failures = 0

    def _unreported(self, child: Child, reported: set[tuple[str, str]]) -> list[Running]:
        """The claims a dead child held that it didn't report, to be settled like reported ones.

        A child reports only hard-limited tasks where the broker can list what a process
        holds, and even one that reports every task can be killed between a claim's commit
        and its report. This node keeps heartbeating, so no recovery would ever free such
        a claim; the broker still records the dead pid as its holder: ask it.
        """
        broker = self.app.broker
        try:
            found = broker.held_by(WorkerRef(self.options.node, child.pid))
        except connection_errors(broker) as exc:
            logger.warning(
                "could not ask the broker for the unreported tasks of child %d (unreachable: %r)",
                child.pid,
                exc,
            )
            return []
        except Exception:
            # Whatever the broker choked on, the supervisor (and every other child) goes on;
            # recovery frees the claim once it is orphaned.
            logger.exception("could not ask the broker for the unreported tasks of child %d", child.pid)
            return []
        unreported = [_holding(d, child.pid) for d in found if (d.id, d.token) not in reported]
        if self.every_task:
            for item in unreported:
                logger.warning(
                    "%s was claimed by child %d, which died before reporting it",
                    describe(item.delivery),
                    child.pid,
                )
        return unreported

    def _settle_orphans(self) -> None:
        """Settle the claims recorded under this node by none of its live processes.

        ``_unreported`` asks the broker once, right after a child was reaped; a database
        server can commit the claim of a child killed mid-statement later than that (the
        server finishes the statement, then finds nobody to send the reply to). Such a row
        names a dead pid under a node that keeps heartbeating: nothing else would ever free
        it. Called with every recovery round (the broker may raise; the chores guard it).
        The same query lists the live children's claims, for :meth:`_requeue_unrun`.

        A lease broker lists no such claims (that would mean scanning its keys): the lease
        would free one after ``worker_dead_after``. Sooner, the supervisor asks ``held_by``
        once more for each child that exited at least ``RECHECK_AFTER`` ago, since a
        command the child had sent before dying is run by the server within moments.
        """
        broker = self.app.broker
        claims = broker.orphaned(self.options.node, [os.getpid()])  # every child's, in one query
        found = [d for d in claims if d.worker.pid not in self.children]
        self._requeue_unrun([d for d in claims if d.worker.pid in self.children])
        due = time.monotonic() - RECHECK_AFTER
        rechecked = [pid for pid, exited in self._recheck.items() if exited <= due]
        for pid in rechecked:
            found += broker.held_by(WorkerRef(self.options.node, pid))
        for pid in rechecked:  # only once every answer is in: if one raised, all are asked again
            del self._recheck[pid]
        for delivery in found:
            pid = delivery.worker.pid
            child, how = self._exited.get(pid, (None, "died"))
            logger.warning(
                "%s was still claimed by process %d, which %s before its claim was seen",
                describe(delivery),
                pid,
                how,
            )
            outcome = self._outcome_for_lost(child, _holding(delivery, pid), how)
            if outcome is not None:
                self.chores.settle_later(delivery, outcome)

    def _requeue_unrun(self, claims: list[Delivery]) -> None:
        """Requeue the live children's claims that none of their threads runs (see
        :mod:`.unrun`). Lease brokers need none of this (the lease runs out), and with every
        task reported over the pipe the broker lists no holders."""
        if self.every_task or self.app.broker.capabilities.leases:
            return
        running = {item.key for child in self.children.values() for item in child.running.items()}
        for child in self.children.values():
            if child.board is not None:
                running.update((task_id, token) for task_id, token, _s, _h in child.board.entries())
        self._unrun.requeue(claims, running, self.chores.settle_later)

    def _outcome_for_lost(self, child: Child | None, item: Running, how: str) -> Outcome | None:
        """What becomes of ``item``, held by ``child`` when it died (None: a process this
        supervisor no longer remembers, treated as one that crashed)."""
        victims = child.victims if child is not None else {}
        killed = child.killed if child is not None else None
        delivery = item.delivery
        revoked = child.revoked.get(item.key) if child is not None else None
        if revoked is not None:
            logger.warning("%s revoked and terminated (%s): its process %s", describe(delivery), revoked, how)
            if not self.app.broker.capabilities.supervisor_settles:
                return None  # revoke() recorded it; the redelivered copy is skipped at claim
            try:
                outcome: Outcome = self.executor.terminated_outcome(delivery, revoked)
                return outcome
            except Exception:
                logger.exception("building the revoked outcome of %s failed", describe(delivery))
                return Complete()
        if not self.app.broker.capabilities.supervisor_settles:
            logger.warning(
                "%s lost with child %d; the broker will redeliver it", describe(delivery), item.pid
            )
            if item.key in victims:
                limit = victims[item.key]
                self._record_failure(item, TimeLimitExceeded(f"hard time limit ({limit:g}s) exceeded"))
            elif killed is None and delivery.deliveries >= self.options.max_deliveries:
                # the broker's delivery limit dead-letters it now; the result says why
                self._record_failure(
                    item, WorkerLostError(f"worker process {how} on each of {delivery.deliveries} deliveries")
                )
            return None
        if item.key in victims:
            limit = victims[item.key]
            logger.error("%s failed: hard time limit (%gs) exceeded", describe(delivery), limit)
            return self._lost(delivery, TimeLimitExceeded(f"hard time limit ({limit:g}s) exceeded"))
        if killed is not None:  # killed at shutdown, or a bystander of a hard limit
            logger.info("%s requeued (%s)", describe(delivery), killed)
            return Requeue(crashed=False)
        if delivery.deliveries >= self.options.max_deliveries:
            logger.error(
                "%s dead-lettered: its process died on each of %d deliveries (%s)",
                describe(delivery),
                delivery.deliveries,
                how,
            )
            return self._lost(
                delivery,
                WorkerLostError(
                    f"worker process {how} while running the task, {delivery.deliveries} deliveries in a row"
                ),
            )
        logger.warning(
            "%s requeued: its process %s (delivery %d of %d)",
            describe(delivery),
            how,
            delivery.deliveries,
            self.options.max_deliveries,
        )
        return Requeue(crashed=True)

    def _lost(self, delivery: Delivery, exc: BaseException) -> Outcome:
        try:
            outcome: Outcome = self.executor.lost_outcome(delivery, exc)
        except Exception:
            logger.exception("building the failure outcome of %s failed", describe(delivery))
            from potatoq.brokers.base import DeadLetter

            outcome = DeadLetter(reason=f"{type(exc).__name__}: {exc}")
        return outcome

    def _record_failure(self, item: Running, exc: BaseException) -> None:
        """On a broker the supervisor can't settle on (RabbitMQ), still store the FAILURE
        result in the result backend (a redelivered copy of a finished task is skipped)."""
        outcome = self._lost(item.delivery, exc)
        record = getattr(outcome, "result", None)
        backend = self.app.backend
        if record is not None and backend is not None:
            try:
                backend.store_result(record)
            except Exception as error:  # noqa: BLE001
                logger.warning("could not record the failure of %s: %r", describe(item.delivery), error)

    @property
    def executor(self) -> Any:
        if self._executor is None:
            from .executor import Executor

            self._executor = Executor(self.app)
        return self._executor

    def _running(self) -> list[Running]:
        """What the children run now: as reported, and (when they don't report every task)
        what their boards show, with the deliveries from the broker (one held_by per child):
        for heartbeats and lease extension. A claim the broker lists but no thread runs (its
        reply was lost with the connection) is left out, so its lease runs out and it goes
        back to the queue instead of being extended for as long as the child lives."""
        items = [item for child in self.children.values() for item in child.running.items()]
        if self.every_task:
            return items
        known = {item.key for item in items}
        broker = self.app.broker
        for child in list(self.children.values()):
            if child.board is None:
                continue
            running = {(task_id, token) for task_id, token, _started, _hard in child.board.entries()}
            if not running - known:
                continue
            try:
                found = broker.held_by(WorkerRef(self.options.node, child.pid))
            except Exception as exc:  # noqa: BLE001 - a heartbeat or a log line must not fail with it
                level = logging.DEBUG if isinstance(exc, connection_errors(broker)) else logging.WARNING
                logger.log(level, "could not list the tasks of child %d: %r", child.pid, exc)
                continue
            items += [_holding(d, child.pid) for d in found if (d.id, d.token) in running - known]
        return items

    # -- rate limits and revoke(terminate=True) ----------------------------------------------

    def _grant_tokens(self) -> None:
        """Tell each child whose rate-limit token is due that it may run its task."""
        for pid, request_id in self.tokens.due():
            child = self.children.get(pid)
            if child is None:
                continue  # it died waiting
            try:
                os.write(child.grants_fd, f"{request_id}\n".encode())
            except OSError as exc:  # it is exiting: reaped soon
                logger.debug("could not grant a rate-limit token to child %d: %r", pid, exc)

    def _terminate_revoked(self) -> None:
        """Signal the children running a task that ``revoke(terminate=True)`` asked to stop
        (a chore, about once a second: one ``get_result`` per running task)."""
        broker = self.app.broker
        if self.stopping or not (broker.capabilities.stores_results or broker.config.result_backend):
            return  # (RabbitMQ without a result backend can't revoke at all)
        running: dict[str, list[tuple[Child, tuple[str, str]]]] = {}
        # A task that started moments ago is asked about next round: a busy node of short
        # tasks then makes no broker call for them at all.
        started_before = time.monotonic() - TERMINATE_MIN_AGE
        for child in self.children.values():
            if child.killed is None:
                for key, started in _running_since(child).items():
                    if started <= started_before:
                        running.setdefault(key[0], []).append((child, key))
        if not running:
            return
        for task_id, signum in termination_requests(broker, list(running)).items():
            for child, key in running[task_id]:
                self._terminate(child, key, signum)

    def _terminate(self, child: Child, key: tuple[str, str], signum: signal.Signals) -> None:
        self._read_events(child)  # it may have finished just now
        if child.killed is not None or key not in _running_since(child):
            return
        logger.warning(
            "task [%s] revoked with terminate=True: sending %s to child %d", key[0], signum.name, child.pid
        )
        child.revoked[key] = signum.name
        self._before_kill(child, {})
        child.killed = KILLED_BY_REVOKE
        child.kill_at = time.monotonic() + TERMINATE_GRACE
        child.terminating.set()  # before the signal: a SIGTERM now means "die", not "stop claiming"
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)

    def _enforce_terminate_grace(self) -> None:
        now = time.monotonic()
        for child in self.children.values():
            if child.kill_at is not None and child.kill_at <= now:
                child.kill_at = None
                logger.warning(
                    "child %d still alive %gs after its terminate signal: killing it",
                    child.pid,
                    TERMINATE_GRACE,
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)

    # -- time limits and kills -----------------------------------------------------------------

    def _enforce_hard_limits(self) -> None:
        now = time.monotonic()
        for child in list(self.children.values()):
            if child.killed is not None:
                continue
            overdue = [limited for limited in _limited(child) if limited.deadline <= now]
            if not overdue:
                continue
            self._read_events(child)  # it may have finished just now
            overdue = [limited for limited in _limited(child) if limited.deadline <= now]
            if not overdue:
                continue
            for limited in overdue:
                logger.error(
                    "%s passed its hard time limit (%gs): killing child %d",
                    describe(limited.item.delivery)
                    if limited.item is not None
                    else f"task [{limited.key[0]}]",
                    limited.hard,
                    child.pid,
                )
                child.victims[limited.key] = limited.hard
            reasons = {x.key: f"TimeLimitExceeded: hard time limit ({x.hard:g}s) exceeded" for x in overdue}
            self._before_kill(child, reasons)
            self._kill(child, KILLED_AT_HARD_LIMIT)

    def _before_kill(self, child: Child, reasons: dict[tuple[str, str], str]) -> None:
        """A broker that can't let the supervisor settle (RabbitMQ) is told, before the
        SIGKILL, what becomes of each delivery the child holds: dead-lettered with its
        reason (a hard-limit victim) or requeued without counting (anything else)."""
        if self.app.broker.capabilities.supervisor_settles:
            return
        prepare = getattr(self.app.broker, "prepare_kill", None)
        if prepare is None:
            return
        for item in child.running.items():
            try:
                prepare(item.delivery, reasons.get(item.key))
            except Exception:
                logger.exception("couldn't prepare %s for its process being killed", describe(item.delivery))

    def _kill(self, child: Child, why: str) -> None:
        if child.killed is None:
            child.killed = why
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)

    def _kill_all(self, why: str) -> None:
        for child in self.children.values():
            if child.killed is None:
                if running := _count_running(child):
                    logger.warning(
                        "child %d still running %d task(s) at the end of the grace period: killing it, "
                        "its tasks are requeued",
                        child.pid,
                        running,
                    )
                self._before_kill(child, {})
                self._kill(child, why)

    # -- signals and shutdown -------------------------------------------------------------------

    def _install_signals(self) -> None:
        os.set_blocking(self._wakeup_w, False)
        os.set_blocking(self._wakeup_r, False)
        signal.set_wakeup_fd(self._wakeup_w, warn_on_full_buffer=False)

        def record(signum: int, frame: FrameType | None) -> None:
            self._signals.append(signum)

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGCHLD):
            signal.signal(signum, record)

    def _drain_wakeup(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self._wakeup_r, 4096):
                pass

    def _handle_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            if signum == signal.SIGCHLD:
                continue  # reaped right after
            if signum == signal.SIGINT:
                self.interrupts += 1
            fast = signum == signal.SIGQUIT or self.interrupts >= 2
            self.begin_shutdown(fast=fast, reason=signal.Signals(signum).name)

    def _hand_on_scheduler(self) -> None:
        """The scheduler stopped: give up its election (RabbitMQ's token) now, so another
        worker takes over within about a second, not after this one's shutdown grace."""
        release = getattr(self.app.broker, "release_scheduler_lease", None)
        if release is None:
            return
        try:
            release()
        except connection_errors(self.app.broker) as exc:  # it moves when the connection closes
            logger.warning("could not hand on the periodic-scheduler token: %r", exc)

    def begin_shutdown(self, *, fast: bool = False, reason: str = "") -> None:
        now = time.monotonic()
        if not self.stopping:
            self.stopping = True
            if self.chores.scheduler is not None:
                self.chores.scheduler = None  # send no new periodic runs while draining
                self._hand_on_scheduler()
            grace = 0.0 if fast else self.options.shutdown_timeout
            self.stop_deadline = now + grace
            running = sum(_count_running(child) for child in self.children.values())
            logger.warning(
                "worker %s shutting down (%s): %d task(s) running, %s",
                self.options.node,
                reason or "requested",
                running,
                "requeueing them now" if fast else f"waiting up to {grace:g}s for them",
            )
            for child in self.children.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM)
        elif fast and (self.stop_deadline is None or self.stop_deadline > now):
            logger.warning("worker %s: stopping now, requeueing unfinished tasks", self.options.node)
            self.stop_deadline = now

    def _finish(self) -> None:
        # Children still alive only if the loop raised: don't leave orphans holding tasks.
        if self.children:
            self._kill_all(KILLED_AT_SHUTDOWN)
            deadline = time.monotonic() + 5.0
            while self.children and time.monotonic() < deadline:
                self._reap()
                time.sleep(0.01)
        self.chores.flush(timeout=min(10.0, max(2.0, self.options.shutdown_timeout)))
        self.chores.forget()
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        self.selector.close()
        for fd in (self._wakeup_r, self._wakeup_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        signals.worker_shutdown.send(sender=self.app, node=self.options.node)
        logger.info("worker %s stopped after %d task(s)", self.options.node, self.finished)


class Limited(NamedTuple):
    """A task running under a hard time limit, as the supervisor watches it."""

    key: tuple[str, str]
    deadline: float  # on the monotonic clock (the same in every process on Linux)
    hard: float
    item: Running | None  # when the child reported it over the pipe


def _limited(child: Child) -> list[Limited]:
    """The tasks of ``child`` running under a hard limit: reported, or on its board."""
    found = [
        Limited(item.key, deadline, item.hard or 0.0, item)
        for item in child.running.items()
        if (deadline := item.hard_deadline()) is not None
    ]
    if child.board is not None:
        for task_id, token, started, hard in child.board.entries():
            if hard is not None:
                found.append(Limited((task_id, token), started + hard, hard, None))
    return found


def _running_since(child: Child) -> dict[tuple[str, str], float]:
    """(task id, token) -> start (monotonic clock) of what ``child`` runs, from what it
    reported and its board: no broker call."""
    found = {item.key: item.started for item in child.running.items()}
    if child.board is not None:
        for task_id, token, started, _hard in child.board.entries():
            found.setdefault((task_id, token), started)
    return found


def _count_running(child: Child) -> int:
    """How many tasks ``child`` runs (only a log line needs it)."""
    return len(_running_since(child))


def _holding(delivery: Delivery, pid: int) -> Running:
    """A delivery the broker says process ``pid`` holds, as the supervisor tracks one."""
    item = Running.of(delivery, pid, None, None)
    item.started_at = delivery.claimed_at  # when it was claimed (so, about when it started)
    return item


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"was killed by {name}"
    return f"exited with code {os.WEXITSTATUS(status)}"
