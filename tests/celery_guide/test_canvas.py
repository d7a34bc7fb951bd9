"""userguide/canvas.rst: signatures, partials, callbacks, chains, groups, chords, map,
starmap and chunks, against a live worker."""

from __future__ import annotations

import os

import pytest

from potatoq import chain, chord, group, signature
from potatoq.exceptions import ChordError

from .conftest import World, wait_for

APP = "tests.celery_guide.proj"
TIMEOUT = 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def proj(world: World):
    world.worker(APP, "-l", "INFO", "-c", "2")
    from tests.celery_guide.proj.celery import app

    yield from world.point(app)


def _lines(name):
    from tests.celery_guide import guide_env

    path = os.path.join(guide_env.out_dir(), name)
    return open(path).read().splitlines() if os.path.exists(path) else []


def test_signatures(proj):
    from tests.celery_guide.proj.tasks import add

    assert repr(signature("tasks.add", args=(2, 2), countdown=10)) == "tasks.add(2, 2)"
    assert signature("tasks.add", args=(2, 2), countdown=10).options == {"countdown": 10}
    assert repr(add.s(2, 2, debug=True)).endswith("add(2, 2, debug=True)")
    s = add.signature((2, 2), {"debug": True}, countdown=10)
    assert s.args == (2, 2)
    assert s.kwargs == {"debug": True}
    assert s.options == {"countdown": 10}
    assert add(2, 2) == 4
    assert add.s(2, 2)() == 4
    assert add.signature((2, 2), countdown=1).apply_async().get(timeout=TIMEOUT) == 4
    assert add.signature((2, 2)).set(countdown=1).delay().get(timeout=TIMEOUT) == 4
    assert add.signature((2, 2)).delay().get(timeout=TIMEOUT) == 4


def test_partials(proj):
    from tests.celery_guide.proj.guide import add_debug, subtract
    from tests.celery_guide.proj.tasks import add

    partial = add.s(2)  # incomplete signature
    assert partial.delay(4).get(timeout=TIMEOUT) == 6  # 4 + 2
    assert partial.apply_async((4,)).get(timeout=TIMEOUT) == 6  # same
    partial = subtract.s(10)  # incomplete: second arg only
    assert partial.delay(30).get(timeout=TIMEOUT) == 20  # -> subtract(30, 10) = 20
    s = add_debug.s(2, 2)
    assert s.delay(debug=True).get(timeout=TIMEOUT) == [4, True]  # -> add(2, 2, debug=True)
    assert s.apply_async(kwargs={"debug": True}).get(timeout=TIMEOUT) == [4, True]  # same
    s = add.signature((2, 2), countdown=10)
    clone = s.clone(countdown=1)
    assert clone.options == {"countdown": 1}  # options merged, new ones win
    assert s.apply_async(countdown=1).get(timeout=TIMEOUT) == 4  # countdown is now 1
    s = add.s(2)
    assert repr(s.clone(args=(4,), kwargs={"debug": True})).endswith("add(4, 2, debug=True)")


def test_immutable_callbacks(proj):
    from tests.celery_guide.proj.guide import reset_buffers
    from tests.celery_guide.proj.tasks import add

    add.apply_async((2, 2), link=reset_buffers.signature(immutable=True)).get(timeout=TIMEOUT)
    add.apply_async((2, 2), link=reset_buffers.si())
    wait_for(lambda: len(_lines("reset_buffers")) == 2, what="two immutable callbacks")
    assert _lines("reset_buffers") == ["()", "()"]  # the parent's result wasn't passed


def test_invert_applies_and_gets(proj):
    from tests.celery_guide.proj.tasks import add

    assert ~add.s(2, 2) == 4


def test_callbacks_get_the_parent_result(proj):
    from tests.celery_guide.proj.guide import log_result
    from tests.celery_guide.proj.tasks import add, mul

    res = add.apply_async((2, 2), link=add.s(8))
    assert res.get(timeout=TIMEOUT) == 4
    child = wait_for(lambda: res.children, what="the link's result in children")
    assert child[0].get(timeout=TIMEOUT) == 12  # 4 + 8

    s = add.s(2, 2)
    s.link(mul.s(4))
    s.link(log_result.s())
    res = s.delay()
    assert res.get(timeout=TIMEOUT) == 4
    wait_for(lambda: _lines("log_result") == ["4"], what="log_result(4)")
    assert sorted(c.get(timeout=TIMEOUT) for c in res.children) == [4, 16]


def test_simple_chain_and_pipes(proj):
    from tests.celery_guide.proj.tasks import add

    # 2 + 2 + 4 + 8
    res = chain(add.s(2, 2), add.s(4), add.s(8))()
    assert res.get(timeout=TIMEOUT) == 16
    assert (add.s(2, 2) | add.s(4) | add.s(8))().get(timeout=TIMEOUT) == 16


def test_immutable_chain_and_parents(proj):
    from tests.celery_guide.proj.tasks import add

    assert add.signature((2, 2), immutable=True).immutable
    res = (add.si(2, 2) | add.si(4, 4) | add.si(8, 8))()
    assert res.get(timeout=TIMEOUT) == 16
    assert res.parent.get(timeout=TIMEOUT) == 8
    assert res.parent.parent.get(timeout=TIMEOUT) == 4


def test_simple_group_and_chord(proj):
    from tests.celery_guide.proj.guide import tsum
    from tests.celery_guide.proj.tasks import add

    res = group(add.s(i, i) for i in range(10))()
    assert res.get(timeout=TIMEOUT) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
    res = chord((add.s(i, i) for i in range(10)), tsum.s())()
    assert res.get(timeout=TIMEOUT) == 90


def test_chord_with_immutable_body(proj):
    from tests.celery_guide.proj.guide import import_contact, notify_complete

    contacts, import_id = ["ann", "bob"], "import-7"
    res = chord((import_contact.s(c) for c in contacts), notify_complete.si(import_id)).apply_async()
    assert res.get(timeout=TIMEOUT) == "import import-7 complete"


def test_blow_your_mind_by_combining(proj):
    from tests.celery_guide.proj.guide import create_user, import_contacts, send_welcome_email, tsum
    from tests.celery_guide.proj.tasks import add, mul

    c1 = add.s(4) | mul.s(8)
    # (16 + 4) * 8
    res = c1(16)
    assert res.get(timeout=TIMEOUT) == 160
    # ((4 + 16) * 2 + 4) * 8
    c2 = add.s(4, 16) | mul.s(2) | (add.s(4) | mul.s(8))
    res = c2()
    assert res.get(timeout=TIMEOUT) == 352
    c3 = group(add.s(i, i) for i in range(10)) | tsum.s()
    res = c3()
    assert res.get(timeout=TIMEOUT) == 90
    new_user_workflow = create_user.s() | group(import_contacts.s(), send_welcome_email.s())
    res = new_user_workflow.delay(username="artv", first="Art", last="Vandelay", email="art@vandelay.com")
    assert res.get(timeout=TIMEOUT) == ["imported contacts of artv", "welcome sent to art@vandelay.com"]
    res = (add.s(4, 4) | group(add.si(i, i) for i in range(10)))()
    assert res.get(timeout=TIMEOUT) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
    assert res.parent.get(timeout=TIMEOUT) == 8


def test_chain_links_children_and_collect(proj):
    from tests.celery_guide.proj.tasks import add, mul

    res = add.apply_async((2, 2), link=mul.s(16))
    assert res.get(timeout=TIMEOUT) == 4
    assert len(res.children) == 1
    assert res.children[0].get(timeout=TIMEOUT) == 64
    assert [(r.id, v) for r, v in res.collect()] == [(res.id, 4), (res.children[0].id, 64)]
    assert [v for _, v in res.collect(intermediate=True)] == [4, 64]


def test_on_error_errback_gets_request_exc_traceback(proj):
    from tests.celery_guide.proj.guide import log_error
    from tests.celery_guide.proj.tasks import add

    res = add.s(2, "2").on_error(log_error.s()).delay()
    wait_for(lambda: _lines(res.id), what="log_error's file named after the request id")
    text = "\n".join(_lines(res.id))
    assert res.id in text and "unsupported operand" in text and "Traceback" in text
    res = add.apply_async((2, "2"), link_error=log_error.s())
    wait_for(lambda: _lines(res.id), what="the same errback through link_error")


def test_chain_of_three_and_parents(proj):
    from tests.celery_guide.proj.tasks import add, mul

    # (4 + 4) * 8 * 10
    res = chain(add.s(4, 4), mul.s(8), mul.s(10))
    assert repr(res) == (
        "tests.celery_guide.proj.tasks.add(4, 4) | tests.celery_guide.proj.tasks.mul(8)"
        " | tests.celery_guide.proj.tasks.mul(10)"
    )
    res = chain(add.s(4, 4), mul.s(8), mul.s(10))()
    assert res.get(timeout=TIMEOUT) == 640
    assert res.parent.get(timeout=TIMEOUT) == 64
    assert res.parent.parent.get(timeout=TIMEOUT) == 8
    assert repr(res.parent.parent).startswith("<AsyncResult: ")
    assert (add.s(2, 2) | mul.s(8) | mul.s(10)).apply_async().get(timeout=TIMEOUT) == 320


def test_chain_raises_a_failed_middle_step_at_once(proj):
    from tests.celery_guide.proj.tasks import add, mul

    # add(4, "x") raises TypeError, so mul never runs. Celery re-checks the parents on
    # every poll interval: get() raises the middle step's error instead of waiting for a
    # last step that never comes (a TimeoutError after TIMEOUT). The first step is held back
    # a second so that get() starts waiting before anything has failed.
    res = chain(add.s(2, 2).set(countdown=1), add.s("x"), mul.s(8)).apply_async()
    with pytest.raises(TypeError, match="unsupported operand"):
        res.get(timeout=TIMEOUT)
    assert res.parent.state == "FAILURE"
    assert res.state == "PENDING"  # the last step was never sent
    assert res.parent.parent.get(timeout=TIMEOUT) == 4

    # The same for the result of a step in the middle and for collect().
    res = chain(add.s(1, 1).set(countdown=1), mul.s(2), add.s("x"), mul.s(8), mul.s(10)).apply_async()
    with pytest.raises(TypeError, match="unsupported operand"):
        res.parent.get(timeout=TIMEOUT)  # the chain up to the 4th step, whose 3rd fails
    with pytest.raises(TypeError, match="unsupported operand"):
        list(res.collect(timeout=TIMEOUT))
    with pytest.raises(TypeError, match="unsupported operand"):
        res.get(timeout=TIMEOUT, interval=0.05)


def test_partial_chain_raises_a_failed_middle_step_at_once(proj):
    from tests.celery_guide.proj.tasks import add, mul

    partial = add.s(4).set(countdown=1) | add.s("x") | mul.s(8)  # its first argument comes later
    res = partial.delay(16)
    with pytest.raises(TypeError, match="unsupported operand"):
        res.get(timeout=TIMEOUT)
    with pytest.raises(TypeError, match="unsupported operand"):
        list(res.collect(timeout=TIMEOUT))
    assert res.parent.parent.get(timeout=TIMEOUT) == 20
    assert res.state == "PENDING"


def test_chain_inherits_the_last_task_id(proj):
    from tests.celery_guide.proj.tasks import add, mul

    res = chain(add.s(4, 4), mul.s(8)).apply_async(task_id="my-chain-id")
    assert res.id == "my-chain-id"
    assert res.get(timeout=TIMEOUT) == 64


def test_groups_results_and_group_callbacks(proj):
    from tests.celery_guide.proj.tasks import add

    g = group(add.s(2, 2), add.s(4, 4))
    res = g()
    assert res.get(timeout=TIMEOUT) == [4, 8]
    assert len(group(add.s(i, i) for i in range(100))().get(timeout=TIMEOUT)) == 100
    g = group(add.s(2, 2), add.s(4, 4))
    g.link(add.s())
    res = g()
    assert res.get(timeout=TIMEOUT) == [4, 8]  # the linked add.s() fails in the background
    job = group(
        [
            add.s(2, 2),
            add.s(4, 4),
            add.s(8, 8),
            add.s(16, 16),
            add.s(32, 32),
        ]
    )
    result = job.apply_async()
    assert result.get(timeout=TIMEOUT) == [4, 8, 16, 32, 64]
    assert result.ready() is True  # have all subtasks completed?
    assert result.successful() is True  # were all subtasks successful?
    assert result.failed() is False
    assert result.waiting() is False
    assert result.completed_count() == 5
    assert result.join(timeout=TIMEOUT) == [4, 8, 16, 32, 64]


def test_group_errback_runs_once_per_failure(proj):
    from tests.celery_guide.proj.guide import fail, log_error

    g = group(fail.s(), fail.s())
    g.link_error(log_error.s())
    res = g()
    for r in res:
        wait_for(lambda r=r: _lines(r.id), what="one errback per failed task")
        assert "KeyError" in "\n".join(_lines(r.id))


def test_group_unrolling(proj):
    from tests.celery_guide.proj.tasks import add

    c = chain(add.s(2, 2), group(add.s(1)), add.s(1))
    assert repr(c) == (
        "tests.celery_guide.proj.tasks.add(2, 2) | tests.celery_guide.proj.tasks.add(1)"
        " | tests.celery_guide.proj.tasks.add(1)"
    )
    assert c().get(timeout=TIMEOUT) == 6
    assert chain(group(add.s(1, 1)), add.s(2))().get(timeout=TIMEOUT) == 4


def test_chord_step_by_step(proj):
    from tests.celery_guide.proj.guide import tsum
    from tests.celery_guide.proj.tasks import add

    assert chord(add.s(i, i) for i in range(100))(tsum.s()).get(timeout=TIMEOUT) == 9900
    callback = tsum.s()
    header = [add.s(i, i) for i in range(100)]
    result = chord(header)(callback)
    assert result.get(timeout=TIMEOUT) == 9900


def test_chord_error_handling(proj):
    from tests.celery_guide.proj.guide import on_chord_error, raising_task, tsum
    from tests.celery_guide.proj.tasks import add

    # the guide leaves the body out of this example; with tsum.s() as the body:
    c = chord([add.s(4, 4), raising_task.s(), add.s(8, 8)], tsum.s())
    result = c()
    with pytest.raises(ChordError, match=r"Dependency .* raised ValueError\('something something'\)"):
        result.get(timeout=TIMEOUT)
    assert "ChordError" in (result.traceback or "")
    c = (group([add.s(1, 1), raising_task.s()]) | tsum.s().on_error(on_chord_error.s())).delay()
    line = wait_for(lambda: _lines("chord_error"), what="the chord body's errback")[0]
    assert line.startswith(c.id + "|ChordError(")


def test_map_and_starmap(proj):
    from tests.celery_guide.proj.guide import tsum
    from tests.celery_guide.proj.tasks import add

    assert ~tsum.map([list(range(10)), list(range(100))]) == [45, 4950]
    assert ~add.starmap(zip(range(10), range(10))) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
    res = add.starmap(zip(range(10), range(10))).apply_async(countdown=1)
    assert res.get(timeout=TIMEOUT) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]


def test_chunks(proj):
    from tests.celery_guide.proj.tasks import add

    res = add.chunks(zip(range(100), range(100)), 10)()
    assert res.get(timeout=TIMEOUT) == [[2 * i for i in range(k, k + 10)] for k in range(0, 100, 10)]
    res = add.chunks(zip(range(100), range(100)), 10).apply_async()
    assert len(res.get(timeout=TIMEOUT)) == 10
    g = add.chunks(zip(range(100), range(100)), 10).group()
    skewed = g.skew(start=1, stop=10)
    assert [t.options["countdown"] for t in skewed.tasks] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
