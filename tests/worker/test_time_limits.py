"""Hard limits kill the child and fail the task (no redelivery); soft limits raise inside it."""

from __future__ import annotations

import time

import pytest

from potatoq.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from potatoq.worker.ipc import PIPE_UNDER, reports_every_task

pytestmark = pytest.mark.slow


def test_hard_time_limit_kills_the_child_and_fails_the_task_without_redelivery(broker_env, broker_client):
    env, client = broker_env, broker_client
    worker = env.worker("-c", "1")
    result = client.hang.apply_async((60,), time_limit=1, soft_time_limit=0.3)
    first_pid = env.wait_marker(f"started-{result.id}")
    with pytest.raises(TimeLimitExceeded):
        result.get(timeout=30)
    dead = client.app.broker.list_dead()
    assert [(d.id, d.deliveries) for d in dead] == [(result.id, 1)]
    assert "TimeLimitExceeded" in dead[0].reason
    # a fresh child took over and the worker still runs tasks
    assert client.pid.delay().get(timeout=30) != first_pid
    assert worker.stop() == 0
    assert "hard time limit" in worker.output()


def test_a_hard_limit_watched_through_the_shared_board_kills_in_time(broker_env, broker_client):
    """A limit of PIPE_UNDER or more isn't reported over the pipe where the broker lists
    what a process holds: the supervisor reads it from the child's board (about once a
    second) and must still kill on time, then find the task with held_by to fail it."""
    env, client = broker_env, broker_client
    limit = PIPE_UNDER + 0.5
    worker = env.worker("-c", "1")
    result = client.hang.apply_async((60,), time_limit=limit, soft_time_limit=0.3)
    env.wait_marker(f"started-{result.id}")
    started = time.monotonic()
    with pytest.raises(TimeLimitExceeded, match=f"hard time limit \\({limit:g}s\\) exceeded"):
        result.get(timeout=30)
    # The task would run for 60 s: killed at its limit (2.5 s after the start here, on an
    # idle machine), with slack for a loaded one.
    assert time.monotonic() - started < limit + 15
    dead = client.app.broker.list_dead()
    assert [(d.id, d.deliveries) for d in dead] == [(result.id, 1)]
    assert worker.stop() == 0
    if not reports_every_task(client.app.broker.capabilities):
        assert f"task [{result.id}] passed its hard time limit ({limit:g}s)" in worker.output()


def test_global_hard_time_limit_from_the_command_line(env, client):
    worker = env.worker("-c", "1", "--time-limit", "1", "--soft-time-limit", "0.2")
    result = client.hang.delay(60)
    with pytest.raises(TimeLimitExceeded):
        result.get(timeout=30)
    assert worker.stop() == 0


def test_soft_time_limit_raises_inside_the_task(env, client):
    worker = env.worker("-c", "1")
    result = client.soft.apply_async((60,), soft_time_limit=0.3)
    assert result.get(timeout=30) == "cleaned up"
    assert (env.dir / f"soft-{result.id}").exists()
    assert worker.stop() == 0


@pytest.mark.parametrize("pool", [["-P", "threads", "-c", "2"], ["-c", "1", "-t", "2"]])
def test_soft_time_limit_in_worker_threads(env, client, pool):
    worker = env.worker(*pool)
    spinning = client.spin.apply_async((60,), soft_time_limit=0.3)
    quick = client.add.delay(1, 1)
    assert quick.get(timeout=30) == 2
    assert spinning.get(timeout=30) == "cleaned up"
    assert worker.stop() == 0


def test_async_task_is_cancelled_at_its_soft_limit_and_can_clean_up(env, client):
    worker = env.worker("-c", "1")
    result = client.async_soft.apply_async((60,), soft_time_limit=0.3)
    with pytest.raises(SoftTimeLimitExceeded):
        result.get(timeout=30)
    assert (env.dir / f"soft-{result.id}").exists()
    # the event loop was left clean: the next async task runs normally
    assert client.async_add.delay(2, 2).get(timeout=30) == 4
    assert worker.stop() == 0
