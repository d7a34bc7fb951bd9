"""Hard limits kill the child and fail the task (no redelivery); soft limits raise inside it."""

from __future__ import annotations

import pytest

from potatoq.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded

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
