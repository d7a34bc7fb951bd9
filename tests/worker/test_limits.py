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
