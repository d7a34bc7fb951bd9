"""Periodic tasks through the broker's dedup: every worker runs the scheduler, each fire
time is sent once."""

from __future__ import annotations

import collections

import pytest

from .conftest import wait_for

pytestmark = pytest.mark.slow

BEAT = {"POTATOQ_TEST_BEAT": "1"}


def _fire_times(env) -> collections.Counter[str]:
    return collections.Counter(name.split("-")[1] for name in env.markers("tick-"))


def test_two_workers_send_each_one_second_fire_time_once(broker_env):
    env = broker_env
    first = env.worker("-c", "1", "-l", "info", env=BEAT)
    second = env.worker("-c", "1", "-l", "info", env=BEAT)
    wait_for(lambda: len(_fire_times(env)) >= 5, timeout=30, what="five fire times")
    assert first.stop() == 0
    assert second.stop() == 0
    fires = _fire_times(env)
    assert all(count == 1 for count in fires.values()), fires
    # fire times sit on the 1-second grid (a run may be missing if it expired under load,
    # but none is ever sent twice)
    assert all(float(t) == round(float(t)) for t in fires), fires
    assert "periodic tick" in first.output() + second.output()


def test_beat_command_runs_only_the_scheduler(env, client):
    beat = env.worker("-l", "info", env=BEAT, command="beat")
    worker = env.worker("-c", "1", "--without-beat", "-l", "info")
    wait_for(lambda: len(_fire_times(env)) >= 2, timeout=30, what="two fire times")
    assert beat.stop() == 0
    assert worker.stop() == 0
    assert "periodic tick" in beat.output()
    assert "periodic tick" not in worker.output()
