"""The calling API of DESIGN.md, against memory://."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from decimal import Decimal
from typing import Any

import pytest

import potatoq
from potatoq import Celery, Potatoq, Task, shared_task, states
from potatoq.exceptions import (
    MaxRetriesExceededError,
    MessageTooLarge,
    NotRegistered,
    ResultNotStored,
    SerializationError,
    TimeoutError,  # noqa: A004
)
from potatoq.testing import drain


def test_public_names_are_pinned() -> None:
    assert sorted(potatoq.__all__) == sorted(
        [
            "AsyncResult",
            "Celery",
            "EagerResult",
            "GroupResult",
            "Potatoq",
            "ResultSet",
            "Signature",
            "Task",
            "__version__",
            "chain",
            "chord",
            "chunks",
            "current_app",
            "current_task",
            "group",
            "maybe_signature",
            "shared_task",
            "signature",
            "states",
            "subtask",
            "uuid",
            "xmap",
            "xstarmap",
        ]
    )
    assert Celery is Potatoq


def test_delay_and_get(app: Potatoq) -> None:
    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    r = add.delay(2, 3)
    assert r.state == states.PENDING and not r.ready()
    assert drain(app) == 1
    assert r.get(timeout=10) == 5
    assert r.state == states.SUCCESS and r.ready() and r.successful() and not r.failed()
    assert r.result == 5


def test_task_names_default_to_module_and_function(app: Potatoq) -> None:
    @app.task
    def mul(x: int, y: int) -> int:
        return x * y

    @app.task(name="custom.name")
    def other() -> None:
        return None

    assert mul.name == f"{__name__}.mul"
    assert "custom.name" in app.tasks
    with pytest.raises(NotRegistered):
        app.tasks["nope"]


def test_apply_async_options_reach_the_message(app: Potatoq) -> None:
    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    eta = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    task_id = str(uuid.uuid4())
    r = add.apply_async((2, 3), eta=eta, priority=5, queue="q", task_id=task_id, expires=7200)
    assert r.id == task_id
    stats = {s.queue: s for s in app.broker.queue_stats()}
    assert stats["q"].delayed == 1
    r2 = add.apply_async((1, 1), countdown=10)
    assert {s.queue: s.delayed for s in app.broker.queue_stats()}["default"] == 1
    drain(app)
    assert r.get(timeout=1) == 5 and r2.get(timeout=1) == 2


def test_send_task_by_name(app: Potatoq) -> None:
    @app.task(name="proj.tasks.add")
    def add(x: int, y: int) -> int:
        return x + y

    r = app.send_task("proj.tasks.add", args=(2, 3))
    drain(app)
    assert r.get(timeout=1) == 5


def test_failure_propagates_and_is_dead_lettered(app: Potatoq) -> None:
    @app.task
    def boom() -> None:
        raise ValueError("bad input 42")

    r = boom.delay()
    drain(app)
    assert r.failed() and r.state == states.FAILURE
    with pytest.raises(ValueError, match="bad input 42"):
        r.get(timeout=1)
    assert isinstance(r.get(timeout=1, propagate=False), ValueError)
    assert "ValueError" in (r.traceback or "")
    dead = app.broker.list_dead()
    assert [d.id for d in dead] == [r.id]
    assert dead[0].reason.startswith("ValueError: bad input 42")


def test_bind_retry_with_countdown_and_request(app: Potatoq) -> None:
    seen: list[tuple[int, str | None]] = []

    @app.task(bind=True, max_retries=3)
    def flaky(self: Task, fail_times: int) -> int:
        seen.append((self.request.retries, self.request.id))
        if self.request.retries < fail_times:
            raise self.retry(exc=RuntimeError("not yet"), countdown=30)
        return self.request.retries

    r = flaky.delay(2)
    drain(app)
    assert r.get(timeout=1) == 2
    assert [s[0] for s in seen] == [0, 1, 2]
    assert {s[1] for s in seen} == {r.id}


def test_max_retries_exceeded(app: Potatoq) -> None:
    @app.task(bind=True, max_retries=1)
    def always(self: Task) -> None:
        raise self.retry(countdown=1)

    r = always.delay()
    drain(app)
    with pytest.raises(MaxRetriesExceededError):
        r.get(timeout=1)


def test_max_retries_defaults_to_three(app: Potatoq) -> None:
    calls: list[int] = []

    @app.task(bind=True)
    def always(self: Task) -> None:
        calls.append(self.request.retries)
        raise self.retry(exc=KeyError("k"), countdown=1)

    r = always.delay()
    drain(app)
    assert calls == [0, 1, 2, 3]
    with pytest.raises(KeyError):
        r.get(timeout=1)


def test_autoretry_for_with_backoff_is_stored_as_delayed(app: Potatoq) -> None:
    calls: list[int] = []

    @app.task(bind=True, autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=5)
    def fetch(self: Task) -> str:
        calls.append(self.request.retries)
        if len(calls) < 3:
            raise ConnectionError("down")
        return "ok"

    r = fetch.delay()
    delivery = app.broker.claim(["default"], potatoq.brokers.base.WorkerRef("t", 1))
    assert delivery is not None
    from potatoq.worker.executor import Executor

    outcome = Executor(app).execute(delivery)
    assert type(outcome).__name__ == "RetryLater"
    assert outcome.message.eta is not None and outcome.message.eta > time.time()  # type: ignore[union-attr]
    assert app.broker.settle(delivery, outcome)
    assert {s.queue: s.delayed for s in app.broker.queue_stats()}["default"] == 1
    drain(app)
    assert r.get(timeout=1) == "ok" and calls == [0, 1, 2]


def test_retry_backoff_grows_and_is_capped(app: Potatoq) -> None:
    @app.task(retry_backoff=10, retry_backoff_max=600, retry_jitter=False)
    def t() -> None:
        return None

    assert [t.retry_delay(n) for n in range(8)] == [10, 20, 40, 80, 160, 320, 600, 600]

    @app.task(retry_backoff=10, retry_jitter=True)
    def j() -> None:
        return None

    for n in range(5):
        assert 10 * 2**n / 2 <= j.retry_delay(n) <= 10 * 2**n


def test_get_timeout_and_no_backend() -> None:
    app = Potatoq("p", broker=f"memory://{uuid.uuid4().hex}", result_backend="disabled")

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    r = add.delay(1, 2)
    with pytest.raises(ResultNotStored):
        r.get(timeout=5)

    app2 = Potatoq("p2", broker=f"memory://{uuid.uuid4().hex}", result_backend="broker")

    @app2.task
    def slow() -> None:
        return None

    with pytest.raises(TimeoutError):
        slow.delay().get(timeout=0.05)


def test_ignore_result_get_returns_none_promptly(app: Potatoq) -> None:
    @app.task(ignore_result=True)
    def fire() -> int:
        return 1

    r = fire.delay()
    assert r.get(timeout=0.01) is None
    drain(app)
    assert app.broker.get_result(r.id) is None
    r2 = fire.apply_async(ignore_result=True)
    assert r2.get() is None


def test_revoke_before_it_runs(app: Potatoq) -> None:
    ran: list[int] = []

    @app.task
    def t() -> None:
        ran.append(1)

    r = t.apply_async(countdown=60)
    r.revoke()
    drain(app)
    assert ran == [] and r.state == states.REVOKED


def test_expired_task_is_not_run(app: Potatoq) -> None:
    ran: list[int] = []

    @app.task
    def t() -> None:
        ran.append(1)

    r = t.apply_async(expires=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))
    drain(app)
    assert ran == [] and r.state == states.REVOKED


def test_forget(app: Potatoq) -> None:
    @app.task
    def t() -> int:
        return 1

    r = t.delay()
    drain(app)
    assert r.get(timeout=1) == 1
    r.forget()
    assert potatoq.AsyncResult(r.id, app=app).state == states.PENDING


def test_unserializable_argument_fails_at_delay_naming_it(app: Potatoq) -> None:
    @app.task
    def t(x: object, *, y: object = None) -> None:
        return None

    with pytest.raises(SerializationError, match="argument 0"):
        t.delay(object())
    with pytest.raises(SerializationError, match="keyword argument 'y'"):
        t.delay(1, y={1, object()})
    assert app.broker.queue_stats() == [] or all(s.waiting == 0 for s in app.broker.queue_stats())


def test_rich_types_round_trip(app: Potatoq) -> None:
    @app.task
    def echo(*args: object) -> object:
        return list(args)

    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    uid = uuid.uuid4()
    r = echo.delay(when, dt.date(2026, 1, 2), uid, Decimal("1.10"), b"\x00\xff", (1, 2))
    drain(app)
    assert r.get(timeout=1) == [when, dt.date(2026, 1, 2), uid, Decimal("1.10"), b"\x00\xff", (1, 2)]


def test_oversized_message_is_refused(app: Potatoq) -> None:
    app.conf.task_max_message_size = 1000

    @app.task
    def t(x: str) -> None:
        return None

    with pytest.raises(MessageTooLarge, match="task_max_message_size"):
        t.delay("x" * 2000)


def test_headers_set_by_before_task_publish_reach_the_broker(app: Potatoq) -> None:
    # The size check encodes the message before the signal runs; the broker must not be
    # given those earlier bytes.
    @app.task
    def t() -> None:
        return None

    def stamp(headers: dict[str, Any], **_: Any) -> None:
        headers["tenant"] = "acme"

    potatoq.signals.before_task_publish.connect(stamp)
    try:
        r = t.delay()
    finally:
        potatoq.signals.before_task_publish.disconnect(stamp)
    queued = app.broker.queued_task(r.id)
    assert queued is not None and queued.message.headers["tenant"] == "acme"


def test_custom_task_base_class(app: Potatoq) -> None:
    events: list[str] = []

    class Tracked(Task):
        def on_success(self, retval: object, task_id: str, args: tuple, kwargs: dict) -> None:  # type: ignore[type-arg]
            events.append(f"ok:{retval}")

        def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:  # type: ignore[no-untyped-def]
            events.append(f"fail:{exc}")

    @app.task(base=Tracked)
    def good() -> int:
        return 7

    @app.task(base=Tracked)
    def bad() -> None:
        raise RuntimeError("x")

    good.delay()
    bad.delay()
    drain(app)
    assert sorted(events) == ["fail:x", "ok:7"]
    assert isinstance(good, Tracked)


def test_shared_task_is_registered_on_every_app() -> None:
    @shared_task
    def shared_add(x: int, y: int) -> int:
        return x + y

    a = Potatoq("a", broker=f"memory://{uuid.uuid4().hex}", result_backend="broker")
    name = f"{__name__}.shared_add"
    assert name in a.tasks
    r = shared_add.delay(1, 2)  # resolves to the current app (a)
    drain(a)
    assert r.get(timeout=1) == 3


def test_async_def_tasks_and_asyncio_callers(app: Potatoq) -> None:
    @app.task
    async def fetch(x: int) -> int:
        await asyncio.sleep(0)
        return x * 2

    async def caller() -> int:
        r = await fetch.adelay(21)
        drain(app)
        value: int = await r.aget(timeout=5)
        return value

    assert asyncio.run(caller()) == 42


def test_calling_a_task_runs_it_inline(app: Potatoq) -> None:
    @app.task(bind=True)
    def who(self: Task) -> bool:
        return bool(self.request.called_directly)

    assert who() is True


def test_always_eager_round_trips_arguments(app: Potatoq) -> None:
    app.conf.task_always_eager = True

    @app.task
    def echo(x: object) -> object:
        return x

    assert echo.delay((1, 2)).get() == (1, 2)
    with pytest.raises(SerializationError):
        echo.delay(object())
    assert app.broker.queue_stats() == []


def test_disable_sync_subtasks_refuses_get_inside_a_task(app: Potatoq) -> None:
    @app.task
    def inner() -> int:
        return 1

    @app.task
    def outer() -> str:
        try:
            inner.delay().get(timeout=0.1)
        except RuntimeError as exc:
            return str(exc)
        return "no error"

    r = outer.delay()
    drain(app)
    assert "Never call result.get() within a task" in r.get(timeout=1)


def test_update_state_progress_reaches_on_message(app: Potatoq) -> None:
    @app.task(bind=True)
    def work(self: Task) -> str:
        self.update_state(state="PROGRESS", meta={"done": 50})
        return "finished"

    r = work.delay()
    drain(app)
    seen: list[str] = []
    assert r.get(timeout=1, on_message=lambda m: seen.append(m["status"])) == "finished"
    assert seen[-1] == "SUCCESS"


@pytest.mark.parametrize("value", [None, True, 7, 10**30, "text", 1.5, [1, "a"], {"k": (1, 2)}])
def test_json_return_values_are_stored(app: Potatoq, value: Any) -> None:
    @app.task(name="returns")
    def returns() -> Any:
        return value

    r = returns.delay()
    drain(app)
    assert r.state == states.SUCCESS
    assert r.get(timeout=1) == value


@pytest.mark.parametrize("value", [object(), [1, object()]])
def test_a_return_value_json_cannot_hold_fails_the_task(app: Potatoq, value: Any) -> None:
    @app.task(name="returns_odd")
    def returns_odd() -> Any:
        return value

    r = returns_odd.delay()
    drain(app)
    assert r.state == states.FAILURE
    assert [d.id for d in app.broker.list_dead()] == [r.id]


def test_argument_check_of_a_class_based_task(app: Potatoq) -> None:
    # The check caches each task function's signature: here a bound run(), which hashes
    # and compares by its instance, so each call finds the same entry.
    class Resize(Task):
        name = "resize"

        def run(self, path: str, *, width: int = 100) -> str:
            return f"{path}@{width}"

    task = app.register_task(Resize)
    for _ in range(2):  # the second call uses the cached signature
        with pytest.raises(TypeError, match=r"resize\(\): missing a required argument: 'path'"):
            task.delay(width=3)
    result = task.delay("a.png", width=3)
    drain(app)
    assert result.get(timeout=5) == "a.png@3"


def test_argument_check_follows_a_replaced_task_function(app: Potatoq) -> None:
    @app.task(name="swap")
    def first(x: int) -> int:
        return x

    first.delay(1)
    with pytest.raises(TypeError, match="swap"):
        first.delay(1, 2)

    @app.task(name="swap")
    def second(x: int, y: int) -> int:
        return x + y

    second.delay(1, 2)  # the new function's signature, not the cached one of the first
    with pytest.raises(TypeError, match="swap"):
        second.delay(1)


def test_a_nan_return_value_fails_the_task_naming_it(app: Potatoq) -> None:
    @app.task
    def ratio() -> float:
        return float("nan")

    r = ratio.delay()
    drain(app)
    assert r.state == states.FAILURE
    assert "NaN and Infinity aren't JSON numbers" in str(r.result)
