"""getting-started/next-steps.rst: the ``proj`` package, calling, results, canvas, routing.

The worker is started as the guide starts it (``celery -A proj worker -l INFO``), with the
``hipri`` and ``lopri`` queues of the routing examples added to ``-Q``. potatoq's default
queue is ``default`` (Celery's is ``celery``): see docs/celery-guide-coverage.md.
"""

from __future__ import annotations

import pytest

from potatoq import chain, chord, group

from .conftest import World, wait_for

APP = "tests.celery_guide.proj"
TIMEOUT = 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def proj(world: World):
    world.worker(APP, "-l", "INFO", "-c", "2", "-Q", "default,hipri,lopri")
    from tests.celery_guide.proj.celery import app

    yield from world.point(app)


def test_calling_tasks(proj):
    from tests.celery_guide.proj.tasks import add

    assert add.delay(2, 2).get(timeout=TIMEOUT) == 4
    assert add.apply_async((2, 2)).get(timeout=TIMEOUT) == 4
    res = add.apply_async((2, 2), queue="lopri", countdown=1)
    assert add(2, 2) == 4  # applying the task directly runs it here, no message sent
    assert res.get(timeout=TIMEOUT) == 4


def test_results_id_errors_and_states(proj):
    from tests.celery_guide.proj.tasks import add

    res = add.delay(2, 2)
    assert res.get(timeout=TIMEOUT) == 4
    assert isinstance(res.id, str) and len(res.id) == 36
    res = add.delay(2, "2")
    with pytest.raises(TypeError, match="unsupported operand"):
        res.get(timeout=TIMEOUT)
    exc = res.get(propagate=False)
    assert isinstance(exc, TypeError)
    assert res.failed() is True
    assert res.successful() is False
    assert res.state == "FAILURE"
    assert proj.AsyncResult("this-id-does-not-exist").state == "PENDING"


def test_signatures_and_partials(proj):
    from tests.celery_guide.proj.tasks import add

    sig = add.signature((2, 2), countdown=10)
    assert repr(sig) == "tests.celery_guide.proj.tasks.add(2, 2)"
    assert sig.options == {"countdown": 10}
    assert add.s(2, 2).set(countdown=10).options == {"countdown": 10}
    s1 = add.s(2, 2)
    res = s1.delay()
    assert res.get(timeout=TIMEOUT) == 4
    s2 = add.s(2)
    res = s2.delay(8)
    assert res.get(timeout=TIMEOUT) == 10


def test_partial_kwargs_take_precedence(proj):
    from tests.celery_guide.proj.guide import add_debug as add

    s3 = add.s(2, 2, debug=True)
    assert s3.delay(debug=False).get(timeout=TIMEOUT) == [4, False]  # debug is now False.


def test_groups(proj):
    from tests.celery_guide.proj.tasks import add

    assert group(add.s(i, i) for i in range(10))().get(timeout=TIMEOUT) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
    g = group(add.s(i) for i in range(10))
    assert g(10).get(timeout=TIMEOUT) == [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]


def test_chains(proj):
    from tests.celery_guide.proj.tasks import add, mul

    # (4 + 4) * 8
    assert chain(add.s(4, 4) | mul.s(8))().get(timeout=TIMEOUT) == 64
    # (? + 4) * 8
    g = chain(add.s(4) | mul.s(8))
    assert g(4).get(timeout=TIMEOUT) == 64
    assert (add.s(4, 4) | mul.s(8))().get(timeout=TIMEOUT) == 64


def test_chords(proj):
    from tests.celery_guide.proj.tasks import add, xsum

    assert chord((add.s(i, i) for i in range(10)), xsum.s())().get(timeout=TIMEOUT) == 90
    assert (group(add.s(i, i) for i in range(10)) | xsum.s())().get(timeout=TIMEOUT) == 90


def test_chain_into_group(proj):
    from tests.celery_guide.proj.guide import apply_filter, upload_document

    filters = ["blur", "sharpen"]
    workflow = upload_document.s("file.txt") | group(apply_filter.s(filter) for filter in filters)
    assert workflow().get(timeout=TIMEOUT) == ["blur(document:file.txt)", "sharpen(document:file.txt)"]


def test_routing_with_task_routes_and_queue_option(proj):
    from tests.celery_guide.proj.guide import dump_context
    from tests.celery_guide.proj.tasks import add

    proj.conf.update(
        task_routes={
            "tests.celery_guide.proj.tasks.add": {"queue": "hipri"},
        },
    )
    try:
        message = proj.make_message(add.name, (2, 2))
        assert message.queue == "hipri"
        assert add.apply_async((2, 2)).get(timeout=TIMEOUT) == 4
        assert add.apply_async((2, 2), queue="hipri").get(timeout=TIMEOUT) == 4
        assert proj.make_message(dump_context.name, (1, 2)).queue == "default"
    finally:
        proj.conf.task_routes = None


def test_timezone_setting(proj):
    proj.conf.timezone = "Europe/London"
    try:
        from potatoq.schedules import resolve_timezone

        assert str(resolve_timezone(proj.conf.timezone)) == "Europe/London"
    finally:
        proj.conf.timezone = None


def test_remote_control_inspect_active_and_status(proj, world: World):
    """``celery -A proj inspect active`` (also ``--destination=``) and ``celery -A proj
    status``: answered from the workers' heartbeats, with no broadcast."""
    from tests.celery_guide.proj.tasks import add

    pong = wait_for(proj.control.ping, what="the worker to answer ping")
    node = next(iter(pong[0]))
    assert node.startswith("potatoq@")
    assert add.delay(1, 1).get(timeout=TIMEOUT) == 2
    done = world.command(APP, "inspect", "active")
    assert done.returncode == 0, done.stderr
    assert f"-> {node}: OK" in done.stdout
    done = world.command(APP, "inspect", "active", f"--destination={node}")
    assert done.returncode == 0 and f"-> {node}: OK" in done.stdout, done.stderr
    inspect = proj.control.inspect(destination=[node])
    wait_for(lambda: inspect.active() == {node: []}, what="a heartbeat with nothing running")
    done = world.command(APP, "inspect", "active", "--destination=celery@example.com")
    assert done.returncode == 3, "no such node: Celery's 'no nodes replied'"
    done = world.command(APP, "status")
    assert done.returncode == 0 and node in done.stdout, done.stderr
