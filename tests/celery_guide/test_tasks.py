"""userguide/tasks.rst: names, the request, retries, states, semipredicates, custom task
classes, handlers, result options and rate limits, against a live worker."""

from __future__ import annotations

import collections
import os
import sys

import pytest

import potatoq
from potatoq import Celery, shared_task
from potatoq.exceptions import MaxRetriesExceededError

from .conftest import World, wait_for

APP = "tests.celery_guide.proj"
TIMEOUT = 20

pytestmark = pytest.mark.slow

# Retries without a countdown wait task_default_retry_delay here (0.1 s instead of Celery's
# 3 minutes) so the examples finish in test time; rate limits come from the examples and
# from task_annotations.
SETTINGS = {
    "task_retry_backoff": False,
    "task_default_retry_delay": 0.1,
    "task_annotations": {"tests.celery_guide.proj.guide.annotated_limited": {"rate_limit": "2/s"}},
}


@pytest.fixture(scope="module")
def worker(world: World):
    return world.worker(APP, "-l", "INFO", "-c", "2", settings=SETTINGS)


@pytest.fixture(scope="module")
def proj(world: World, worker):
    from tests.celery_guide.proj.celery import app

    saved = {k: app.conf[k] for k in SETTINGS}
    app.conf.update(SETTINGS)
    yield from world.point(app)
    app.conf.update(saved)


def _lines(name):
    from tests.celery_guide import guide_env

    path = os.path.join(guide_env.out_dir(), name)
    return open(path).read().splitlines() if os.path.exists(path) else []


def test_decorators_names_and_shared_task(proj):
    app = Celery("names")

    @app.task(serializer="json")
    def create_user(username, password):
        return username

    @shared_task
    def add(x, y):
        return x + y

    def decorator1(fun):
        return fun

    decorator2 = decorator1

    @app.task
    @decorator2
    @decorator1
    def add2(x, y):
        return x + y

    @app.task(name="sum-of-two-numbers")
    def add3(x, y):
        return x + y

    assert add3.name == "sum-of-two-numbers"
    assert create_user.name == f"{__name__}.create_user"
    assert add2(2, 3) == 5
    assert add(1, 2) == 3

    class MyCelery(Celery):
        def gen_task_name(self, name, module):
            if module.endswith(".tasks"):
                module = module[:-6]
            return super().gen_task_name(name, module)

    app = MyCelery("main")
    from tests.celery_guide.proj import tasks

    assert app.gen_task_name("add", tasks.__name__) == "tests.celery_guide.proj.add"
    assert "tests.celery_guide.proj.tasks.add" in proj.tasks


def test_bound_task_logs_its_request_id(proj, worker):
    from tests.celery_guide.proj.guide import logged_add

    res = logged_add.delay(2, 3)
    assert res.get(timeout=TIMEOUT) == 5
    worker.wait_output("Adding 2 + 3")
    assert any(
        res.id in line
        for line in worker.output().splitlines()
        if "logged_add" in line or res.id == line[-36:]
    )


def test_task_inheritance_on_failure(proj, worker):
    from tests.celery_guide.proj.guide import my_failing_task

    res = my_failing_task.delay()
    with pytest.raises(KeyError):
        res.get(timeout=TIMEOUT)
    worker.wait_output(f"Task {res.id} failed: KeyError()")
    worker.wait_output(f"Task {res.id} finished with status: FAILURE")


def test_handlers_run_in_order(proj, worker):
    from tests.celery_guide.proj.guide import my_task

    res = my_task.delay(2, 3)
    assert res.get(timeout=TIMEOUT) == 5
    worker.wait_output(f"Task {res.id} finished with status: SUCCESS")
    mine = [line for line in worker.output().splitlines() if line.startswith(f"Task {res.id}")]
    assert mine == [
        f"Task {res.id} starting with args (2, 3)",
        f"Task {res.id} succeeded with result: 5",
        f"Task {res.id} finished with status: SUCCESS",
    ]


def test_task_request(proj, worker):
    from tests.celery_guide.proj.guide import dump_context

    res = dump_context.delay(2, 3)
    task_id, args, kwargs = res.get(timeout=TIMEOUT)
    assert (task_id, args, kwargs) == (res.id, [2, 3], {})
    worker.wait_output(f"Executing task id {res.id}, args: (2, 3) kwargs: {{}}")


def test_argument_checking(proj):
    from tests.celery_guide.proj.guide import add_untyped
    from tests.celery_guide.proj.tasks import add

    assert add.delay(8, 8).get(timeout=TIMEOUT) == 16
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        add.delay(8)
    res = add_untyped.delay(8)  # works locally, but the worker receiving the task raises
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        res.get(timeout=TIMEOUT)


def test_hiding_sensitive_arguments(proj):
    from tests.celery_guide.proj.guide import add_debug as charge

    account = 1
    res = (
        charge.s(account, 2, debug="1234 5678 1234 5678")
        .set(kwargsrepr=repr({"card": "**** **** **** 5678"}))
        .delay()
    )
    assert res.get(timeout=TIMEOUT) == [3, "1234 5678 1234 5678"]


def test_retry_with_exc(proj):
    from tests.celery_guide.proj.guide import send_twitter_status

    res = send_twitter_status.delay("2", "hello")  # the fake Twitter fails twice
    assert res.get(timeout=TIMEOUT) == 2
    assert _lines("tweets-hello") == ["0", "1", "2"]


def test_retry_countdown_overrides_default_retry_delay(proj):
    from tests.celery_guide.proj.guide import retry_in_30_minutes, retry_in_a_minute

    assert retry_in_a_minute.retry_delay(0) == 30 * 60
    assert retry_in_a_minute.retry_delay(0, countdown=60) == 60
    res = retry_in_a_minute.delay(1, 2)
    wait_for(lambda: res.state == "RETRY", what="the RETRY state")
    assert isinstance(res.info, OSError)  # RETRY: result is the exception that caused it
    assert "something_raising" in res.traceback
    res2 = retry_in_30_minutes.delay()
    wait_for(lambda: res2.state == "RETRY", what="the RETRY state")
    stats = {s.queue: s for s in proj.broker.queue_stats()}
    assert stats["default"].delayed >= 2  # both wait in the broker, a minute / 30 minutes
    res.revoke()
    res2.revoke()


def test_autoretry_for_with_retry_kwargs(proj):
    from tests.celery_guide.proj.guide import FailWhaleError, refresh_timeline

    res = refresh_timeline.delay("ann")
    with pytest.raises(FailWhaleError):
        res.get(timeout=TIMEOUT)
    assert _lines("timeline-ann") == ["0", "1", "2", "3", "4", "5"]  # max_retries=5


def test_max_retries_defaults_to_3(proj):
    from tests.celery_guide.proj.guide import no_retry_limit_given

    assert no_retry_limit_given.max_retries_for() == 3
    res = no_retry_limit_given.delay()
    with pytest.raises(OSError, match="down"):
        res.get(timeout=TIMEOUT)
    assert res.retries == 3


def test_class_based_retry_options_backoff(proj):
    from tests.celery_guide.proj.guide import BaseTaskWithRetry, flaky

    assert issubclass(type(flaky), BaseTaskWithRetry)
    # retry_backoff=True: 1 s, 2 s, 4 s ... capped by retry_backoff_max, no jitter
    assert [flaky.retry_delay(n) for n in range(4)] == [1, 2, 4, 8]
    assert flaky.retry_delay(20) == 700
    res = flaky.delay("a", 2)  # TypeError twice (autoretry_for), then success
    assert res.get(timeout=TIMEOUT) == 2
    runs = [line.split() for line in _lines("flaky-a")]
    assert [r[0] for r in runs] == ["0", "1", "2"]
    for (_, raised_at, _), (_, _, eta), delay in zip(runs, runs[1:], (1, 2)):
        assert abs(float(eta) - float(raised_at) - delay) < 0.5  # the retry was due `delay` s later


def test_retry_jitter_spreads_delays(proj):
    from tests.celery_guide.proj.guide import flaky

    jittered = type(flaky)()
    jittered.retry_jitter = True
    delays = {jittered.retry_delay(3) for _ in range(50)}
    assert len(delays) > 1
    assert all(4 <= d <= 8 for d in delays)  # potatoq's "equal jitter": never less than half


def test_throws_is_logged_at_info_without_traceback(proj, worker):
    from tests.celery_guide.proj.guide import HttpNotFound, get_foo

    res = get_foo.delay()
    with pytest.raises(HttpNotFound):
        res.get(timeout=TIMEOUT)
    assert res.state == "FAILURE"  # reported as a failure to the result backend
    lines = worker.lines_after(res.id)
    wait_for(lambda: worker.lines_after(res.id), what="the log line")
    lines = worker.lines_after(res.id)
    assert "INFO" in lines[0] and "HttpNotFound" in lines[0]
    assert "ERROR" not in lines[0]
    assert not any(line.startswith("Traceback") for line in lines[1:3])


def test_throws_writes_no_error_level_line(world, proj):
    from tests.celery_guide.proj.guide import HttpNotFound, get_foo
    from tests.celery_guide.proj.tasks import add

    # Celery logs an expected exception once, at INFO, and nothing at ERROR. A worker of
    # its own with one process on a queue of its own: the add sent after get_foo is logged
    # after everything get_foo's run logs, so its line is the event to wait for.
    worker = world.worker(APP, "-l", "INFO", "-c", "1", "-Q", "throws", settings=SETTINGS)
    res = get_foo.apply_async(queue="throws")
    with pytest.raises(HttpNotFound):
        res.get(timeout=TIMEOUT)
    after = add.apply_async((2, 2), queue="throws")
    assert after.get(timeout=TIMEOUT) == 4
    wait_for(lambda: any(after.id in line for line in worker.lines_after(res.id)), what="add's log line")
    lines = worker.lines_after(res.id)
    assert any("INFO" in line and "raised expected" in line for line in lines)
    assert not [line for line in lines if "ERROR" in line]


def test_pydantic_arguments_and_return_values(proj):
    from tests.celery_guide.proj.guide import ArgModel, scaled, strict_x, x

    # tasks.rst, "Argument validation with Pydantic": a dict in, the model in the task,
    # the returned model stored as a dict.
    assert x.delay({"value": 1}).get(timeout=TIMEOUT) == {"value": "example: 1"}
    assert x.delay({"value": "2"}).get(timeout=TIMEOUT) == {"value": "example: 2"}  # lax: coerced
    assert x(ArgModel(value=3)) == {"value": "example: 3"}  # a direct call validates too
    res = strict_x.delay({"value": "1"})  # pydantic_strict: no coercion
    with pytest.raises(Exception, match="1 validation error for ArgModel") as failed:
        res.get(timeout=TIMEOUT)
    assert type(failed.value).__name__ == "ValidationError"
    assert strict_x.delay({"value": 4}).get(timeout=TIMEOUT) == {"value": "strict: 4"}
    # pydantic_context reaches the validators (with the task's name), pydantic_dump_kwargs
    # model_dump; a bound task's self isn't validated, Model | None is.
    assert scaled.delay({"value": 2}).get(timeout=TIMEOUT) == {"Total": 20}
    assert scaled.delay({"value": 2}, extra={"value": 5}).get(timeout=TIMEOUT) == {"Total": 25}


def test_pydantic_needs_pydantic_and_dict_options(monkeypatch):
    app = Celery("pydantic-options", broker="memory://pydantic-options", set_as_current=False)
    with pytest.raises(potatoq.exceptions.ImproperlyConfigured, match="pydantic_context must be a dict"):
        app.task(pydantic=True, pydantic_context=["factor"])(lambda arg: arg)
    monkeypatch.setitem(sys.modules, "pydantic", None)  # as if it weren't installed
    with pytest.raises(potatoq.exceptions.ImproperlyConfigured, match=r"potatoq\[pydantic\]"):
        app.task(pydantic=True)(lambda arg: arg)


def test_rate_limit_per_worker_node(proj):
    from tests.celery_guide.proj.guide import annotated_limited, limited

    # annotated_limited gets its rate limit from task_annotations, in the worker's settings
    for task in (limited, annotated_limited):
        starts = potatoq.group(task.s(i) for i in range(6))().get(timeout=TIMEOUT)
        times = sorted(started for _, started in starts)
        # 2/s for the whole worker (-c 2), as in Celery: six starts span 2.5 s (the first
        # token is free); per process they would span about 1 s.
        assert times[-1] - times[0] >= 2.0, times


def test_custom_state_progress(proj):
    from tests.celery_guide.proj.guide import upload_files

    res = upload_files.delay(["a", "b", "c"])
    seen = []
    res.get(timeout=TIMEOUT, on_message=lambda body: seen.append((body["status"], body["result"])))
    # The result is polled (every 0.1 s at most): on a loaded machine a 0.2 s PROGRESS state
    # can pass between two reads, so the test asks for some of them, each once, in order.
    progress = [result["current"] for state, result in seen if state == "PROGRESS"]
    assert progress and progress == sorted(set(progress)) and set(progress) <= {0, 1, 2}, seen
    assert seen[-1] == ("SUCCESS", 3)
    assert upload_files(["x"]) == 1  # called directly: no state updates


def test_ignore(proj, worker):
    from tests.celery_guide.proj.guide import get_tweets, some_task

    res = some_task.apply_async(task_id="revoked-by-hand")
    worker.wait_output(f"[{res.id}] ignored")
    assert res.state == "PENDING"  # no state recorded
    res = get_tweets.delay("ann")
    assert res.get(timeout=TIMEOUT) == ["tweet of ann"]  # stored by hand, then Ignore
    assert some_task.delay().get(timeout=TIMEOUT) == "ran"


def test_reject(proj):
    from tests.celery_guide.proj.guide import render_scene, requeues

    res = render_scene.delay("/big/scene")
    with pytest.raises(MemoryError):
        res.get(timeout=TIMEOUT)
    assert res.failed()
    assert requeues.delay().get(timeout=TIMEOUT) == "received two times"


def test_class_based_task_keeps_state_per_process(proj):
    from tests.celery_guide.proj.guide import NaiveAuthenticateServer, process_rows

    assert proj.send_task(NaiveAuthenticateServer.name, ("george", "password")).get(timeout=TIMEOUT) is True
    assert proj.send_task(NaiveAuthenticateServer.name, ("bob", "x")).get(timeout=TIMEOUT) is False
    rows = potatoq.group(process_rows.s() for _ in range(6))().get(timeout=TIMEOUT)
    opened = collections.defaultdict(set)
    for pid, opened_at in rows:
        opened[pid].add(opened_at)
    assert all(len(times) == 1 for times in opened.values())  # one connection per process


def test_app_wide_task_cls():
    app = Celery("tasks", task_cls="tests.celery_guide.proj.guide:DatabaseTask")

    @app.task
    def process(x):
        return x

    assert hasattr(process, "db") and process.db["connection"] == os.getpid()


def test_registry_lists_tasks(proj):
    assert "tests.celery_guide.proj.tasks.add" in proj.tasks
    assert "proj.naive_authenticate_server" in proj.tasks


def test_ignore_result_per_call(proj):
    from tests.celery_guide.proj.guide import mytask

    result = mytask.apply_async((1, 2), ignore_result=True)
    assert result.get() is None
    result = mytask.apply_async((1, 2), ignore_result=False)
    assert result.get(timeout=TIMEOUT) == 3


def test_avoid_synchronous_subtasks(proj):
    from tests.celery_guide.proj.guide import update_page_info, update_page_info_bad, update_page_info_sync

    update_page_info.delay("http://example.com/")
    wait_for(lambda: _lines("page_info") == ["http://example.com/ 32"], what="the chain's last step")
    with pytest.raises(RuntimeError, match="Never call result.get"):
        update_page_info_bad.delay("http://example.com/").get(timeout=TIMEOUT)
    assert update_page_info_sync.delay("http://example.com/").get(timeout=TIMEOUT) == {"length": 32}


def test_track_started(proj):
    from tests.celery_guide.proj.guide import slow_started

    res = slow_started.delay(1)
    wait_for(lambda: res.state == "STARTED", what="STARTED")
    assert isinstance(res.info["pid"], int) and res.info["hostname"]
    assert res.get(timeout=TIMEOUT) == 1


def test_retry_outside_a_worker_raises():
    from tests.celery_guide.proj.guide import no_retry_limit_given

    with pytest.raises(OSError):
        no_retry_limit_given()
    assert MaxRetriesExceededError
