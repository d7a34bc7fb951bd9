"""SIGTERM / SIGINT: stop claiming, let running tasks finish within the grace period,
requeue the rest without counting a crash, exit 0. Nothing is lost."""

from __future__ import annotations

import signal

import pytest

from .conftest import wait_for

pytestmark = pytest.mark.slow


def _waiting(client) -> int:
    return sum(s.waiting for s in client.app.broker.queue_stats())


def test_sigterm_finishes_the_short_task_and_requeues_the_long_one(broker_env, broker_client):
    env, client = broker_env, broker_client
    # The short task must finish within the grace after the test sees the shutdown begin:
    # several hops between processes, so a margin a loaded machine can't eat up.
    grace = {"worker_shutdown_timeout": 5.0}
    worker = env.worker("-c", "2", conf=grace)
    short = client.block.delay("short", release="go-short")
    long = client.block.delay("long", release="go-long")
    env.wait_marker("started-short")
    env.wait_marker("started-long")
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "shutting down" in worker.output(), what="shutdown to begin")
    env.mark("go-short")
    assert worker.wait() == 0
    assert short.get(timeout=5) == env.marker("started-short")["pid"]
    assert long.state == "PENDING"
    assert _waiting(client) == 1  # back in the queue, not lost
    assert client.app.broker.list_dead() == []
    # a new worker runs it; the shutdown didn't count as a crashed delivery
    env.mark("go-long")
    again = env.worker("-c", "1")
    assert long.get(timeout=30)
    assert env.marker("started-long")["delivery"] == 1
    assert again.stop() == 0


def test_second_sigint_stops_at_once_and_still_requeues(env, client):
    grace = {"worker_shutdown_timeout": 120}
    worker = env.worker("-c", "1", conf=grace)
    long = client.block.delay("long", release="never")
    env.wait_marker("started-long")
    worker.signal(signal.SIGINT)
    wait_for(lambda: "shutting down" in worker.output(), what="shutdown to begin")
    worker.signal(signal.SIGINT)
    assert worker.wait(timeout=20) == 0
    assert _waiting(client) == 1
    assert long.state == "PENDING"


def test_sigterm_when_idle_exits_zero_and_forgets_the_heartbeat(env, client):
    worker = env.worker("-c", "2")
    assert client.add.delay(1, 1).get(timeout=30) == 2
    wait_for(client.app.broker.workers, what="a heartbeat")
    assert worker.stop() == 0
    assert client.app.broker.workers() == []


def test_solo_pool_runs_tasks_and_stops_on_sigterm(env, client):
    worker = env.worker("-P", "solo")
    assert client.pid.delay().get(timeout=30) == worker.pid
    assert client.async_add.delay(2, 3).get(timeout=30) == 5
    assert worker.stop() == 0
