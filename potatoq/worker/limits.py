"""Soft time limits: raise ``SoftTimeLimitExceeded`` inside a running task.

The hard limit is the supervisor's job (it kills the child, see ``supervisor.py``); the soft
one has to happen inside the task so that it can clean up. Two mechanisms, one interface:

* a task running in the process's main thread gets a ``SIGALRM`` from ``setitimer``; the
  handler raises in the main thread, which also interrupts blocking calls such as
  ``time.sleep`` or a socket read;
* a task running in another thread (``-t``/``-P threads``) gets an asynchronous exception
  from a watchdog thread via ``PyThreadState_SetAsyncExc``. It is raised at the next Python
  bytecode, so a thread blocked inside C code sees it only when that call returns; the hard
  limit covers the rest.

An ``async def`` task running on an event loop in the main thread is cancelled instead
(``CancelledError("SoftTimeLimitExceeded")`` at its current ``await``): an exception raised
from the signal handler would surface in the loop's ``select()`` and leave the coroutine
suspended inside the loop. A task that lets the cancellation propagate fails with
``SoftTimeLimitExceeded``. (In worker threads an async task gets the plain asynchronous
exception, which fails it without running its cleanup.)

Either way an exception can't be aimed precisely at "still inside the task": it may land
just after the task returned. :meth:`SoftLimits.guard` disarms under a lock, so nothing new
fires after it exits, and callers treat a ``SoftTimeLimitExceeded`` that escapes the guard
as "the task hit its soft limit" only if no outcome was produced yet.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

from potatoq.exceptions import SoftTimeLimitExceeded

if TYPE_CHECKING:
    import asyncio

__all__ = ["SOFT_LIMIT_CANCEL", "SoftLimits"]

#: The ``CancelledError`` message an async task gets at its soft limit.
SOFT_LIMIT_CANCEL = "SoftTimeLimitExceeded"


def _raise_in_thread(thread_id: int, exc: type[BaseException] | None) -> None:
    """Schedule ``exc`` in the thread (``None`` clears a pending one)."""
    import ctypes  # only when a soft limit fires

    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    import asyncio

    for task in asyncio.all_tasks(loop):
        task.cancel(SOFT_LIMIT_CANCEL)


class SoftLimits:
    """Arms a soft limit around each task run, in the main thread or in worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        # main-thread (signal) state
        self._armed_token: int | None = None
        self._armed_seconds = 0.0
        self._armed_deadline = 0.0  # time.monotonic() at which the armed task's limit passes
        self._timer_at: float | None = None  # when the pending SIGALRM fires (None: none)
        self._signal_installed = False
        # thread (watchdog) state: token -> (thread id, seconds); heap of (deadline, token)
        self._armed: dict[int, tuple[int, float]] = {}
        self._fired: set[int] = set()
        self._heap: list[tuple[float, int]] = []
        self._wakeup = threading.Condition(self._lock)
        self._watchdog: threading.Thread | None = None
        self._stopped = False

    @contextlib.contextmanager
    def guard(self, seconds: float | None) -> Iterator[None]:
        """Raise ``SoftTimeLimitExceeded`` in the current thread after ``seconds`` (None: never)."""
        if seconds is None or seconds <= 0:
            yield
            return
        # Signal handlers run in the main thread only: its tasks get SIGALRM, others the watchdog.
        if threading.get_ident() != threading.main_thread().ident:
            with self._thread_guard(seconds):
                yield
            return
        # The main thread's guard is written out here rather than nested as a second
        # context manager: a busy worker enters it for every task.
        self._arm_signal(seconds)
        try:
            yield
        finally:
            self._armed_token = None  # a SIGALRM from now on does nothing

    # -- main thread: SIGALRM ----------------------------------------------------------------

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        self._timer_at = None
        if self._armed_token is None:
            return
        remaining = self._armed_deadline - time.monotonic()
        if remaining > 0:  # the timer was set for an earlier task's limit: wait for this one's
            self._set_timer(remaining)
            return
        self._armed_token = None
        message = f"soft time limit ({self._armed_seconds:g}s) exceeded"
        # No asyncio loaded: no coroutine ran in this process (the executor imports it
        # for the first one), so no loop can be running.
        asyncio = sys.modules.get("asyncio")
        loop = asyncio._get_running_loop() if asyncio is not None else None
        if loop is not None:
            # An async task: raising here would land in the event loop's select() and
            # leave the coroutine suspended in the loop. Cancel it instead, so it sees
            # CancelledError at its current await, can clean up, and the loop is left clean.
            # call_soon_threadsafe wakes the loop: select() is retried after this handler.
            loop.call_soon_threadsafe(_cancel_all, loop)
            return
        raise SoftTimeLimitExceeded(message)

    def _set_timer(self, seconds: float) -> None:
        seconds = max(seconds, 0.001)  # setitimer(0) would disarm instead
        self._timer_at = time.monotonic() + seconds
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def _arm_signal(self, seconds: float) -> None:
        # The timer is left running when a task ends: the next task (the same limit,
        # usually) finds it pending no later than its own deadline and sets nothing, so
        # a busy worker makes no setitimer calls per task. When it fires for a limit
        # that is over, the handler just sets it again for the running task's deadline.
        if not self._signal_installed:
            signal.signal(signal.SIGALRM, self._on_alarm)
            self._signal_installed = True
        self._armed_seconds = seconds
        self._armed_deadline = time.monotonic() + seconds
        self._armed_token = next(self._counter)
        timer_at = self._timer_at
        if timer_at is None or timer_at > self._armed_deadline:
            self._set_timer(seconds)

    # -- other threads: watchdog + async exception ---------------------------------------------

    @contextlib.contextmanager
    def _thread_guard(self, seconds: float) -> Iterator[None]:
        thread_id = threading.get_ident()
        with self._lock:
            token = next(self._counter)
            self._armed[token] = (thread_id, seconds)
            heapq.heappush(self._heap, (time.monotonic() + seconds, token))
            if self._watchdog is None:
                self._watchdog = threading.Thread(target=self._watch, name="potatoq-soft-limits", daemon=True)
                self._watchdog.start()
            self._wakeup.notify()
        try:
            yield
        finally:
            with self._lock:
                self._armed.pop(token, None)
                fired = token in self._fired
                self._fired.discard(token)
            if fired:  # fired but perhaps not raised yet: the task is over, drop it
                _raise_in_thread(thread_id, None)

    def _watch(self) -> None:
        with self._lock:
            while not self._stopped:
                now = time.monotonic()
                while self._heap and (self._heap[0][0] <= now or self._heap[0][1] not in self._armed):
                    _, token = heapq.heappop(self._heap)
                    armed = self._armed.pop(token, None)
                    if armed is not None:
                        self._fired.add(token)
                        _raise_in_thread(armed[0], SoftTimeLimitExceeded)
                timeout = self._heap[0][0] - now if self._heap else None
                self._wakeup.wait(timeout)

    def close(self) -> None:
        with self._lock:
            self._stopped = True
            self._wakeup.notify()
