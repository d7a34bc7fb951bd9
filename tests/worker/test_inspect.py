"""``app.control.inspect()`` and ``app.control.ping()``: Celery's shapes, keyed by node name,
answered from the broker (heartbeats and claims) while real workers run."""

from __future__ import annotations

import pytest

from tests.worker.conftest import Env, wait_for


def _running(client: object, task_id: str) -> dict | None:
    from tests.worker import proj

    replies = proj.app.control.inspect().active() or {}
    for node, tasks in replies.items():
        for task in tasks:
            if task["id"] == task_id:
                return {"node": node, **task}
    return None


def _check_inspection(env: Env, client: object) -> None:
    from tests.worker import proj

    inspect = proj.app.control.inspect()
    assert inspect.active() is None and inspect.ping() is None, "no worker yet: no replies, as Celery"
    assert proj.app.control.ping() == []
    worker = env.worker("-c", "2", "-n", "inspected@here")
    result = proj.block.delay("inspect", release="go-inspect")
    env.wait_marker("started-inspect")
    task = wait_for(lambda: _running(client, result.id), what="the task in inspect().active()")
    node = task["node"]
    assert node.startswith("inspected@here:")
    assert task["name"] == task["type"] == "proj.block"
    assert task["worker_pid"] == env.marker("started-inspect")["pid"]
    assert task["hostname"] == node
    assert isinstance(task["time_start"], float)
    if proj.app.broker.capabilities.finds_queued:  # the arguments come from the claim
        assert task["args"] == ["inspect"] and task["kwargs"] == {"release": "go-inspect"}

    assert proj.app.control.ping() == [{node: {"ok": "pong"}}]
    assert inspect.ping() == {node: {"ok": "pong"}}
    assert "proj.add" in inspect.registered()[node]
    assert inspect.scheduled() == {node: []} and inspect.reserved() == {node: []}
    stats = inspect.stats()[node]
    assert stats["pid"] == worker.pid and stats["pool"]["max-concurrency"] == 2
    assert inspect.active_queues()[node] == [{"name": "default", "routing_key": "default"}]
    # destination: the full node name or the -n name; anyone else gets no reply
    assert proj.app.control.inspect(destination=["inspected@here"]).ping() == {node: {"ok": "pong"}}
    assert proj.app.control.inspect(destination=[node]).registered() is not None
    assert proj.app.control.inspect(destination="nobody@nowhere").ping() is None
    assert proj.app.control.ping(destination=["nobody@nowhere"]) == []

    env.mark("go-inspect")
    assert result.get(timeout=30) == task["worker_pid"]
    wait_for(lambda: inspect.active() == {node: []}, what="the finished task to leave active()")


def test_inspect_and_ping_answer_for_running_workers(env: Env, client: object) -> None:
    _check_inspection(env, client)


@pytest.mark.parametrize("broker_env", ["postgres", "redis", "rabbitmq"], indirect=True)
def test_inspect_on_other_brokers(broker_env: Env, broker_client: object) -> None:
    _check_inspection(broker_env, broker_client)
