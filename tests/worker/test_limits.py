"""Soft time limits raise inside the code they guard, and never after the guard exits."""

from __future__ import annotations

import threading
import time

import pytest

from potatoq.exceptions import SoftTimeLimitExceeded
from potatoq.worker.limits import SoftLimits


def test_main_thread_guard_interrupts_a_blocking_sleep():
    limits = SoftLimits()
    started = time.monotonic()
    with pytest.raises(SoftTimeLimitExceeded), limits.guard(0.05):
        time.sleep(30)
    assert time.monotonic() - started < 20


def test_guard_that_exits_in_time_raises_nothing_later():
    limits = SoftLimits()
    with limits.guard(0.05):
        pass
    time.sleep(0.1)  # would be interrupted if the alarm were still armed


def test_thread_guard_interrupts_python_code():
    limits = SoftLimits()
    outcome: list[str] = []

    def spin() -> None:
        try:
            with limits.guard(0.05):
                while True:
                    pass
        except SoftTimeLimitExceeded:
            outcome.append("raised")

    thread = threading.Thread(target=spin)
    thread.start()
    thread.join(20)
    limits.close()
    assert outcome == ["raised"]


def test_thread_guard_disarmed_on_exit():
    limits = SoftLimits()
    outcome: list[str] = []

    def quick() -> None:
        with limits.guard(0.05):
            pass
        deadline = time.monotonic() + 0.2
        while time.monotonic() < deadline:
            pass
        outcome.append("no exception")

    thread = threading.Thread(target=quick)
    thread.start()
    thread.join(20)
    limits.close()
    assert outcome == ["no exception"]


def test_back_to_back_guards_set_the_timer_once(monkeypatch):
    # A busy worker runs one guard per task: the pending timer is reused, not set again.
    import signal

    calls: list[float] = []
    real = signal.setitimer

    def counting(which: int, seconds: float, interval: float = 0.0) -> tuple[float, float]:
        calls.append(seconds)
        return real(which, seconds, interval)

    monkeypatch.setattr(signal, "setitimer", counting)
    limits = SoftLimits()
    for _ in range(50):
        with limits.guard(30.0):
            pass
    assert len(calls) == 1
    with limits.guard(0.05), pytest.raises(SoftTimeLimitExceeded):
        time.sleep(30)  # a shorter limit than the pending timer's sets it earlier
    assert len(calls) == 2
    real(signal.ITIMER_REAL, 0)


def test_a_timer_set_for_an_earlier_task_waits_on_for_the_running_one():
    limits = SoftLimits()
    with limits.guard(0.05):
        pass  # the timer stays set for this task's limit
    started = time.monotonic()
    with pytest.raises(SoftTimeLimitExceeded), limits.guard(0.3):
        time.sleep(30)  # the first alarm comes early: set again, then raises at 0.3 s
    # never before its own limit (a lower bound: a slow machine only makes it later)
    assert time.monotonic() - started >= 0.3
