"""userguide/calling.rst: the calling API, links, on_message, ETA, expiry, publish retries,
connection errors, routing and result options, against a live worker."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import pytest

from potatoq import Celery, group
from potatoq.exceptions import OperationalError

from .conftest import World, wait_for

APP = "tests.celery_guide.proj"
TIMEOUT = 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def proj(world: World):
    world.worker(APP, "-l", "INFO", "-c", "2", "-Q", "default,priority.high")
    from tests.celery_guide.proj.celery import app

    yield from world.point(app)


def _lines(name):
    from tests.celery_guide import guide_env

    path = os.path.join(guide_env.out_dir(), name)
    return open(path).read().splitlines() if os.path.exists(path) else []


def test_basics_and_cheat_sheet(proj):
    from tests.celery_guide.proj.guide import add_debug as task

    arg1, arg2 = 1, 2
    assert task.delay(arg1, arg2, debug="x").get(timeout=TIMEOUT) == [3, "x"]
    assert task.apply_async(args=[arg1, arg2], kwargs={"debug": "y"}).get(timeout=TIMEOUT) == [3, "y"]
    assert task.s(arg1, arg2, debug="z").apply_async().get(timeout=TIMEOUT) == [3, "z"]
    res = task.apply_async((1, 1), task_id="my_own_task_id")
    assert res.id == "my_own_task_id"
    assert res.get(timeout=TIMEOUT) == [2, False]
    assert proj.send_task("tests.celery_guide.proj.tasks.add", args=(2, 3)).get(timeout=TIMEOUT) == 5


def test_link_callback_and_list_of_links(proj):
    from tests.celery_guide.proj.guide import other_task
    from tests.celery_guide.proj.tasks import add

    res = add.apply_async((2, 2), link=add.s(16))
    assert res.get(timeout=TIMEOUT) == 4
    assert wait_for(lambda: res.children)[0].get(timeout=TIMEOUT) == 20  # (2 + 2) + 16
    res = add.apply_async((2, 2), link=[add.s(16), other_task.s()])
    assert res.get(timeout=TIMEOUT) == 4
    wait_for(lambda: "4" in _lines("other_task"), what="other_task(4)")
    assert sorted(c.get(timeout=TIMEOUT) for c in res.children) == [4, 20]


def test_errback_called_with_request_exc_traceback(proj):
    from tests.celery_guide.proj.guide import error_handler
    from tests.celery_guide.proj.tasks import add

    res = add.apply_async((2, "2"), link_error=error_handler.s())
    line = wait_for(lambda: _lines("errors-" + res.id), what="error_handler(request, exc, traceback)")[0]
    assert line == "TypeError(\"unsupported operand type(s) for +: 'int' and 'str'\")|True"
    log = proj_worker_output()
    assert f"Task {res.id} raised exception: TypeError(" in log


def test_old_style_errback_gets_the_task_id(proj):
    from tests.celery_guide.proj.guide import on_error

    res = proj.send_task("tests.celery_guide.proj.tasks.add", (2, "2"), link_error=on_error.s())
    line = wait_for(lambda: _lines("on_error-" + res.id), what="on_error(task_id)")[0]
    assert line.startswith("TypeError(")


def test_on_message_sees_progress_states(proj):
    from tests.celery_guide.proj.guide import hello

    bodies = []

    def on_raw_message(body):
        print(body)
        bodies.append(body)

    a, b = 1, 1
    r = hello.apply_async(args=(a, b))
    assert r.get(on_message=on_raw_message, propagate=False, timeout=TIMEOUT) == "hello world: 2"
    seen = [(m["status"], m["result"]) for m in bodies]
    # The result is polled (every 0.1 s at most), so on a loaded machine one of the two 0.3 s
    # PROGRESS states can pass between two reads: each seen once at most, in order.
    progress = [result for state, result in seen if state == "PROGRESS"]
    assert progress and progress in (
        [{"progress": 50}, {"progress": 90}],
        [{"progress": 50}],
        [{"progress": 90}],
    )
    assert seen[-1] == ("SUCCESS", "hello world: 2")
    assert bodies[-1] == {
        "task_id": r.id,
        "result": "hello world: 2",
        "children": [],
        "status": "SUCCESS",
        "traceback": None,
    }


def test_eta_and_countdown(proj):
    from tests.celery_guide.proj.tasks import add

    sent = time.time()
    result = add.apply_async((2, 2), countdown=3)
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    later = add.apply_async((2, 2), eta=tomorrow)
    assert result.get(timeout=TIMEOUT) == 4  # this takes at least 3 seconds to return
    assert result.date_done >= sent + 3
    assert later.state == "PENDING"
    later.revoke()


def test_expiration(proj):
    from tests.celery_guide.proj.tasks import add

    kwargs = {}
    ok = add.apply_async((10, 10), expires=60)
    ok2 = add.apply_async((10, 10), kwargs, expires=datetime.now(UTC) + timedelta(days=1))
    assert ok.get(timeout=TIMEOUT) == 20 and ok2.get(timeout=TIMEOUT) == 20
    # a task the worker receives after its expiry time is marked REVOKED
    late = add.apply_async((10, 10), countdown=1, expires=0.5)
    wait_for(lambda: late.state == "REVOKED", what="the expired task REVOKED")
    from potatoq.exceptions import TaskRevokedError

    with pytest.raises(TaskRevokedError):
        late.get(timeout=TIMEOUT)


def test_message_sending_retry_options(proj):
    from tests.celery_guide.proj.tasks import add

    assert add.apply_async((2, 2), retry=False).get(timeout=TIMEOUT) == 4
    assert (
        add.apply_async(
            (2, 2),
            retry=True,
            retry_policy={
                "max_retries": 3,
                "interval_start": 0,
                "interval_step": 0.2,
                "interval_max": 1,
                "retry_errors": None,
            },
        ).get(timeout=TIMEOUT)
        == 4
    )


def test_connection_error_raises_operational_error(proj):
    # the broker is down: an address where nothing listens
    down = Celery("down", broker="redis://127.0.0.1:1/0", broker_connection_timeout=0.5)

    @down.task
    def add(x, y):
        return x + y

    from potatoq.utils.log import get_logger

    logger = get_logger(__name__)

    started = time.monotonic()
    try:
        add.delay(2, 2)
    except add.OperationalError as exc:
        logger.exception("Sending task raised: %r", exc)
        raised = exc
    else:
        raised = None
    assert isinstance(raised, OperationalError)
    assert time.monotonic() - started >= 0.4  # retried until broker_connection_timeout
    with pytest.raises(add.OperationalError):
        add.apply_async((2, 2), retry=False)
    with pytest.raises(add.OperationalError):
        add.apply_async((2, 2), retry=True, retry_policy={"max_retries": 1, "interval_start": 0})
    down.close()


def test_serializer_compression_and_repr_options(proj):
    from tests.celery_guide.proj.tasks import add

    assert add.apply_async((10, 10), serializer="json").get(timeout=TIMEOUT) == 20
    assert add.apply_async((2, 2), compression="zlib").get(timeout=TIMEOUT) == 4
    assert add.apply_async((2, 3), argsrepr="(<secret-x>, <secret-y>)").get(timeout=TIMEOUT) == 5


def test_group_instead_of_a_publisher(proj):
    from tests.celery_guide.proj.tasks import add

    numbers = [(2, 2), (4, 4), (8, 8), (16, 16)]
    res = group(add.s(i, j) for i, j in numbers).apply_async()
    assert res.get(timeout=TIMEOUT) == [4, 8, 16, 32]


def test_routing_option_queue(proj):
    from tests.celery_guide.proj.guide import dump_context

    res = dump_context.apply_async((1, 2), queue="priority.high")
    assert res.get(timeout=TIMEOUT)[1] == [1, 2]


def test_results_options(proj):
    from tests.celery_guide.proj.tasks import add

    result = add.apply_async((1, 2), ignore_result=True)
    assert result.get() is None
    # Do not ignore result (default)
    result = add.apply_async((1, 2), ignore_result=False)
    assert result.get(timeout=TIMEOUT) == 3
    result = add.apply_async((1, 2), headers={"periodic_task_name": "task_name"})
    assert result.get(timeout=TIMEOUT) == 3


def test_priority_option(proj):
    from tests.celery_guide.proj.tasks import add

    assert add.apply_async((1, 1), priority=255).get(timeout=TIMEOUT) == 2
    assert add.apply_async((1, 1), priority=0).get(timeout=TIMEOUT) == 2


_WORLD_LOGS: list = []


def proj_worker_output() -> str:
    from tests.celery_guide.proj.celery import app

    return _worker_log(app)


def _worker_log(app) -> str:
    import glob

    from tests.celery_guide import guide_env

    return "".join(open(p).read() for p in glob.glob(os.path.join(guide_env.out_dir(), "worker-*.log")))
