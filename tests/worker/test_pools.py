"""Recycling, -Q fairness, threads and async tasks, on real worker processes."""

from __future__ import annotations

import pytest

from .conftest import wait_for

pytestmark = pytest.mark.slow


def test_child_is_recycled_after_max_tasks_per_child(env, client):
    worker = env.worker("-c", "1", "--max-tasks-per-child", "2")
    pids = [client.pid.delay().get(timeout=30) for _ in range(6)]
    assert pids[0] == pids[1] and pids[2] == pids[3] and pids[4] == pids[5]
    assert len(set(pids)) == 3
    assert worker.stop() == 0


def test_child_is_recycled_above_max_memory_per_child(env, client):
    worker = env.worker("-c", "1", "--max-memory-per-child", "1K", "-l", "info")  # every child is above 1 KiB
    pids = [client.pid.delay().get(timeout=30) for _ in range(3)]
    assert len(set(pids)) == 3
    assert worker.stop() == 0
    assert "worker_max_memory_per_child" in worker.output()


def test_prefork_children_start_with_the_inherited_heap_frozen(env, client):
    """The supervisor freezes its objects before each fork and the child after its set-up,
    so a child's full collections skip the app and the libraries (short pauses, no
    copy-on-write of inherited pages by the collector)."""
    worker = env.worker("-c", "1")
    frozen = client.gc_frozen.delay().get(timeout=30)
    assert worker.stop() == 0
    assert frozen > 10_000  # the app, potatoq and the broker's client library, at the least


def test_claims_rotate_fairly_over_queues(env, client):
    busy = [client.which.apply_async(("a",), queue="a") for _ in range(30)]
    quiet = [client.which.apply_async(("b",), queue="b") for _ in range(5)]
    worker = env.worker("-c", "1", "-Q", "a,b")
    results = [r.get(timeout=30) for r in busy + quiet]
    assert worker.stop() == 0
    records = sorted(
        (client.app.broker.get_result(r.id) for r in busy + quiet), key=lambda rec: rec.date_done
    )
    order = [rec.result[0] for rec in records]
    # queue b's five tasks are among the first ten runs instead of waiting behind a's thirty
    assert order[:10].count("b") == 5, order
    assert {r[1] for r in results} == {results[0][1]}


def test_threads_pool_runs_tasks_concurrently_in_one_process(env, client):
    worker = env.worker("-P", "threads", "-c", "3")
    running = [client.block.delay(f"t{i}", release="go") for i in range(3)]
    starts = [env.wait_marker(f"started-t{i}") for i in range(3)]
    assert len({s["pid"] for s in starts}) == 1
    env.mark("go")
    assert {r.get(timeout=30) for r in running} == {starts[0]["pid"]}
    assert worker.stop() == 0


def test_prefork_children_with_threads(env, client):
    worker = env.worker("-c", "2", "-t", "2")
    running = [client.block.delay(f"t{i}", release="go") for i in range(4)]
    starts = [env.wait_marker(f"started-t{i}") for i in range(4)]
    assert len({s["pid"] for s in starts}) == 2
    env.mark("go")
    for r in running:
        r.get(timeout=30)
    assert worker.stop() == 0


def test_async_tasks_run_on_an_event_loop_in_the_child(env, client):
    worker = env.worker("-c", "1", "-t", "2")
    results = [client.async_add.delay(i, 1) for i in range(10)]
    assert [r.get(timeout=30) for r in results] == [i + 1 for i in range(10)]
    assert worker.stop() == 0


def test_heartbeat_lists_running_tasks(env, client):
    worker = env.worker("-c", "1", "-n", "hb@test")
    result = client.block.delay("hb", release="go")
    env.wait_marker("started-hb")
    info = wait_for(
        lambda: [w for w in client.app.broker.workers() if w.running], what="a heartbeat with running tasks"
    )[0]
    assert info.node.startswith("hb@test:")
    assert [(t.task, t.task_id) for t in info.running] == [("proj.block", result.id)]
    assert "proj.add" in info.registered
    env.mark("go")
    result.get(timeout=30)
    assert worker.stop() == 0
