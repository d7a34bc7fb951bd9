"""Canvas semantics as Celery users know them, against memory://."""

from __future__ import annotations

import time
from typing import Any

import pytest

from potatoq import Potatoq, chain, chord, group, signature
from potatoq.exceptions import ChordError
from potatoq.testing import drain


@pytest.fixture
def tasks(app: Potatoq) -> dict[str, Any]:
    calls: list[Any] = []

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    @app.task
    def mul(x: int, y: int) -> int:
        return x * y

    @app.task
    def tsum(xs: list[int]) -> int:
        calls.append(("tsum", list(xs)))
        return sum(xs)

    @app.task
    def fail(x: int) -> None:
        raise ValueError(f"fail {x}")

    @app.task
    def record(*args: Any) -> None:
        calls.append(("record", args))

    @app.task
    def failed_id(task_id: str) -> None:
        calls.append(("failed_id", task_id))

    @app.task
    def on_err(request: Any, exc: BaseException, traceback: str) -> None:
        calls.append(("on_err", request.id, type(exc).__name__))

    return {
        "failed_id": failed_id,
        "add": add,
        "mul": mul,
        "tsum": tsum,
        "fail": fail,
        "record": record,
        "on_err": on_err,
        "calls": calls,
    }


def test_chain_passes_each_result_on(app: Potatoq, tasks: dict[str, Any]) -> None:
    add, mul = tasks["add"], tasks["mul"]
    r = chain(add.s(1, 2), add.s(3), mul.s(10))()
    drain(app)
    assert r.get(timeout=1) == 60
    assert r.parent is not None and r.parent.get(timeout=1) == 6
    assert r.parent.parent is not None and r.parent.parent.get(timeout=1) == 3


def test_chain_call_options_go_to_its_first_task(app: Potatoq, tasks: dict[str, Any]) -> None:
    add = tasks["add"]
    before = time.time()
    r = (add.s(1, 2) | add.s(3)).apply_async(countdown=900, queue="emails", priority=7)
    first = r.parent
    assert first is not None
    queued = app.broker.queued_task(first.id)
    assert queued is not None
    assert (queued.queue, queued.state, queued.priority) == ("emails", "scheduled", 7)
    assert queued.due is not None and queued.due >= before + 900
    # the second step isn't sent until the first has run
    assert app.broker.queued_task(r.id) is None


def test_pipe_operator_and_partial_chain_called_with_argument(app: Potatoq, tasks: dict[str, Any]) -> None:
    add = tasks["add"]
    r = (add.s(4, 4) | add.s(8))()
    partial = (add.s(2) | add.s(3)).delay(1)
    drain(app)
    assert r.get(timeout=1) == 16
    assert partial.get(timeout=1) == 6


def test_immutable_signature_ignores_the_parent_result(app: Potatoq, tasks: dict[str, Any]) -> None:
    add = tasks["add"]
    r = (add.s(1, 1) | add.si(10, 10))()
    drain(app)
    assert r.get(timeout=1) == 20


def test_group_results_come_back_in_order(app: Potatoq, tasks: dict[str, Any]) -> None:
    add = tasks["add"]
    g = group(add.s(i, i) for i in range(10))()
    drain(app)
    assert g.get(timeout=1) == [i * 2 for i in range(10)]
    assert g.ready() and g.successful() and g.completed_count() == 10


def test_chord_callback_gets_header_results_in_order_once(app: Potatoq, tasks: dict[str, Any]) -> None:
    add, tsum = tasks["add"], tasks["tsum"]
    r = chord((add.s(i, i) for i in range(10)), tsum.s())()
    drain(app)
    assert r.get(timeout=1) == 90
    assert tasks["calls"] == [("tsum", [i * 2 for i in range(10)])]


def test_chord_header_then_body_call_form(app: Potatoq, tasks: dict[str, Any]) -> None:
    add, tsum = tasks["add"], tasks["tsum"]
    r = chord(add.s(i, i) for i in range(3))(tsum.s())
    drain(app)
    assert r.get(timeout=1) == 6


def test_group_then_task_in_a_chain_is_a_chord(app: Potatoq, tasks: dict[str, Any]) -> None:
    add, tsum, mul = tasks["add"], tasks["tsum"], tasks["mul"]
    r = (group(add.s(i, i) for i in range(4)) | tsum.s() | mul.s(2))()
    drain(app)
    assert r.get(timeout=1) == 24


def test_chain_into_group(app: Potatoq, tasks: dict[str, Any]) -> None:
    add = tasks["add"]
    res = (add.s(1, 1) | group(add.s(10), add.s(20)))()
    drain(app)
    assert res.get(timeout=1) == [12, 22]


def test_failing_header_fails_the_chord(app: Potatoq, tasks: dict[str, Any]) -> None:
    add, tsum, fail, on_err = tasks["add"], tasks["tsum"], tasks["fail"], tasks["on_err"]
    body = tsum.s().on_error(on_err.s())
    r = chord([add.s(1, 1), fail.s(7), add.s(2, 2)], body)()
    drain(app)
    with pytest.raises(ChordError, match="ValueError"):
        r.get(timeout=1)
    assert not any(c[0] == "tsum" for c in tasks["calls"])
    assert ("on_err", r.id, "ChordError") in tasks["calls"]


def test_empty_chord_runs_body_with_empty_list(app: Potatoq, tasks: dict[str, Any]) -> None:
    r = chord([], tasks["tsum"].s())()
    drain(app)
    assert r.get(timeout=1) == 0


def test_link_and_link_error(app: Potatoq, tasks: dict[str, Any]) -> None:
    add, record, fail, on_err = tasks["add"], tasks["record"], tasks["fail"], tasks["on_err"]
    ok = add.apply_async((2, 2), link=record.s("after"))
    bad = fail.apply_async((1,), link_error=on_err.s())
    old_style = fail.apply_async((2,), link_error=tasks["failed_id"].s())
    drain(app)
    assert ("record", (4, "after")) in tasks["calls"]
    assert ("on_err", bad.id, "ValueError") in tasks["calls"]
    assert ("failed_id", old_style.id) in tasks["calls"]
    assert [c.id for c in ok.children] != [] and ok.children[0].ready()
    assert [v for _, v in ok.collect()] == [4, None]


def test_signature_set_clone_and_dict_round_trip(app: Potatoq, tasks: dict[str, Any]) -> None:
    add = tasks["add"]
    s = add.s(2).set(countdown=5, queue="math")
    assert s.options == {"countdown": 5, "queue": "math"}
    again = signature(dict(s), app=app)
    assert again.task == add.name and again.args == (2,)
    partial = s.clone(args=(1,))
    assert partial.args == (1, 2)
    r = add.signature((3, 4), countdown=0).apply_async()
    drain(app)
    assert r.get(timeout=1) == 7


def test_invert_applies_and_gets_eagerly_in_eager_mode(app: Potatoq, tasks: dict[str, Any]) -> None:
    app.conf.task_always_eager = True
    assert ~tasks["add"].s(2, 2) == 4


def test_map_starmap_and_chunks(app: Potatoq, tasks: dict[str, Any]) -> None:
    add, tsum = tasks["add"], tasks["tsum"]
    m = tsum.map([[1, 2], [3, 4]]).delay()
    sm = add.starmap([(1, 2), (3, 4)]).delay()
    ch = add.chunks([(i, i) for i in range(10)], 3).group().skew(start=0, step=0)()
    drain(app)
    assert m.get(timeout=1) == [3, 7]
    assert sm.get(timeout=1) == [3, 7]
    assert ch.get(timeout=1) == [[0, 2, 4], [6, 8, 10], [12, 14, 16], [18]]


def test_apply_runs_inline_through_the_codec(app: Potatoq, tasks: dict[str, Any]) -> None:
    r = (tasks["add"].s(1, 2) | tasks["mul"].s(3)).apply()
    assert r.get() == 9
