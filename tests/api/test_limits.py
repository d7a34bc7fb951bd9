"""Which concurrency limit a call carries (potatoq/limits.py): task options, apply_async
options, the task_limits and task_queue_limits settings, and bad values named."""

from __future__ import annotations

import dataclasses

import pytest

from potatoq import Potatoq
from potatoq.brokers.limits import HEADER
from potatoq.exceptions import ImproperlyConfigured
from potatoq.testing import drain


@pytest.fixture
def app() -> Potatoq:
    app = Potatoq("proj", broker="memory://limits-api")
    app.conf.task_limits = {"proj.report": {"concurrency": 4}}
    app.conf.task_queue_limits = {"exports": 2}

    @app.task(name="proj.sync", concurrency_limit=3, concurrency_key=lambda customer, **_: customer)
    def sync(customer: str, full: bool = False) -> str:
        return customer

    @app.task(name="proj.report")
    def report() -> None:
        pass

    @app.task(name="proj.plain")
    def plain() -> None:
        pass

    return app


def header(app: Potatoq, name: str, *args: object, **options: object) -> object:
    return app.make_message(name, args, **options).headers.get(HEADER)


def test_a_task_option_with_a_key_function_gives_each_key_its_slots(app: Potatoq) -> None:
    assert header(app, "proj.sync", "acme") == ["proj.sync[acme]", 3]
    assert app.make_message("proj.sync", ("acme",), {"full": True}).headers[HEADER] == ["proj.sync[acme]", 3]


def test_apply_async_options_override_the_task(app: Potatoq) -> None:
    assert header(app, "proj.sync", "acme", concurrency_limit=1, concurrency_key="z") == ["proj.sync[z]", 1]
    message = app.tasks["proj.plain"].apply_async(concurrency_limit=2)
    assert app.broker.queued_task(message.id).message.headers[HEADER] == ["proj.plain", 2]  # type: ignore[union-attr]


def test_the_task_limits_setting_and_queue_limits(app: Potatoq) -> None:
    assert header(app, "proj.report") == ["proj.report", 4]
    assert header(app, "proj.plain", queue="exports") == ["queue:exports", 2]
    assert header(app, "proj.plain") is None


def test_bad_limits_are_refused_naming_them(app: Potatoq) -> None:
    with pytest.raises(ValueError, match="concurrency limit of 'proj.plain' must be a positive integer"):
        header(app, "proj.plain", concurrency_limit=0)
    app.conf.task_limits = {"proj.plain": {"concurency": 2}}
    with pytest.raises(ValueError, match=r"task_limits\['proj.plain'\] has unknown options \['concurency'\]"):
        header(app, "proj.plain")


def test_limited_tasks_run_through_the_memory_broker(app: Potatoq) -> None:
    results = [app.tasks["proj.sync"].delay(c) for c in ("a", "b", "a")]
    drain(app)
    assert [r.get(timeout=5) for r in results] == ["a", "b", "a"]
    assert app.broker.limits() == []


def test_a_broker_without_limits_refuses_a_limited_task(monkeypatch: pytest.MonkeyPatch) -> None:
    app = Potatoq("proj", broker="memory://limits-refused")
    without = dataclasses.replace(app.broker.capabilities, concurrency_limits=False)
    monkeypatch.setattr(type(app.broker), "capabilities", without)
    with pytest.raises(ImproperlyConfigured, match="doesn't enforce concurrency limits"):
        app.send_task("proj.x", concurrency_limit=1)
