"""Pausing a queue on real workers, on every broker processes can share: within about a
second no worker claims from it, the task it runs finishes, sending still works, and the
pause outlives a worker restart. Each step waits on an event (a marker, a result, the
worker's log line saying it saw the pause), never on a sleep."""

from __future__ import annotations

from potatoq.states import PENDING

from .conftest import wait_for

SEEN_PAUSE = "queue(s) paused, not claiming from them: default"


def waiting_in(client, queue: str) -> int:
    return sum(s.waiting for s in client.app.broker.queue_stats() if s.queue == queue)


def test_a_paused_queue_is_not_claimed_and_its_running_task_finishes(broker_env, broker_client):
    env, client = broker_env, broker_client
    worker = env.worker("-c", "1", "-l", "info", "-Q", "default,other")
    running = client.block.delay("running", release="go")
    env.wait_marker("started-running")
    assert client.app.control.pause_queue("default") is True
    env.mark("go")
    assert running.get(timeout=30)  # the task running when its queue was paused finishes
    wait_for(lambda: SEEN_PAUSE in worker.output(), what="the worker to see the pause")
    held = [client.add.delay(i, i) for i in range(3)]  # producers can still send
    # The worker is free and consumes "other": a task sent there later runs, "default" waits.
    assert client.which.apply_async(("other",), queue="other").get(timeout=30)[0] == "other"
    assert waiting_in(client, "default") == 3
    assert all(r.state == PENDING for r in held)
    assert client.app.control.resume_queue("default") is True
    assert [r.get(timeout=30) for r in held] == [0, 2, 4]


def test_a_pause_outlives_a_worker_restart(broker_env, broker_client):
    env, client = broker_env, broker_client
    client.app.control.pause_queue("default")
    first = env.worker("-c", "1", "-l", "info", "-Q", "default,other")
    wait_for(lambda: SEEN_PAUSE in first.output(), what="the worker to see the pause")
    first.stop()
    held = client.add.delay(1, 1)
    second = env.worker("-c", "1", "-l", "info", "-Q", "default,other")
    wait_for(lambda: SEEN_PAUSE in second.output(), what="the new worker to see the pause")
    assert client.which.apply_async(("other",), queue="other").get(timeout=30)[0] == "other"
    assert held.state == PENDING and waiting_in(client, "default") == 1
    assert client.app.control.paused_queues().keys() == {"default"}
    client.app.control.resume_queue("default")
    assert held.get(timeout=30) == 2


def test_a_worker_whose_every_queue_is_paused_starts_again_on_resume(broker_env, broker_client):
    env, client = broker_env, broker_client
    client.app.control.pause_queue("default")
    worker = env.worker("-c", "1", "-l", "info")
    wait_for(lambda: SEEN_PAUSE in worker.output(), what="the worker to see the pause")
    held = client.add.delay(3, 4)
    assert client.app.control.resume_queue("default") is True
    assert held.get(timeout=30) == 7
    assert "queue(s) resumed: default" in worker.output()
