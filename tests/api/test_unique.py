"""Which unique key a call holds (potatoq/unique.py): task options, apply_async options,
the default key of the arguments, the holder's result returned for a duplicate, and bad
values named. The broker side is tests/test_broker_unique.py."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from potatoq import Potatoq
from potatoq.brokers.unique import HEADER
from potatoq.exceptions import ImproperlyConfigured, InvalidName
from potatoq.testing import drain
from potatoq.unique import default_key
from tests import services


@pytest.fixture
def app() -> Potatoq:
    app = Potatoq("proj", broker=f"memory://{uuid.uuid4().hex}", result_backend="broker")

    @app.task(name="proj.sync", unique={"key": lambda customer, **_: customer, "for": 600})
    def sync(customer: str, full: bool = False) -> str:
        return customer

    @app.task(name="proj.report", unique=True)
    def report(day: str, *, fmt: str = "pdf", lang: str = "en") -> str:
        return day

    @app.task(name="proj.started", unique={"states": ("waiting", "scheduled")})
    def started() -> None:
        pass

    @app.task(name="proj.plain")
    def plain() -> None:
        pass

    return app


def header(app: Potatoq, name: str, *args: object, **options: object) -> object:
    kwargs = options.pop("kwargs", None)
    return app.make_message(name, args, kwargs, **options).headers.get(HEADER)  # type: ignore[arg-type]


def test_the_default_key_is_the_task_name_and_a_digest_of_the_arguments(app: Potatoq) -> None:
    one = header(app, "proj.report", "2026-12-05", kwargs={"fmt": "csv", "lang": "de"})
    same = header(app, "proj.report", "2026-12-05", kwargs={"lang": "de", "fmt": "csv"})
    other = header(app, "proj.report", "2026-12-06", kwargs={"fmt": "csv", "lang": "de"})
    assert one == same == [default_key("proj.report", ("2026-12-05",), {"fmt": "csv", "lang": "de"}), None, 1]
    assert one != other
    assert str(one[0]).startswith("proj.report:") and len(str(one[0])) == len("proj.report:") + 64  # type: ignore[index]


def test_a_key_function_states_and_call_options(app: Potatoq) -> None:
    assert header(app, "proj.sync", "acme", kwargs={"full": True}) == ["proj.sync[acme]", 600.0, 1]
    assert header(app, "proj.sync", "acme", unique_key="z", unique_for=5) == ["proj.sync[z]", 5.0, 1]
    assert header(app, "proj.started") == [default_key("proj.started", (), {}), None, 0]
    assert header(app, "proj.plain") is None
    assert header(app, "proj.plain", unique_key="nightly") == ["proj.plain[nightly]", None, 1]


def test_a_duplicate_returns_the_holders_result_and_runs_once(app: Potatoq) -> None:
    first = app.tasks["proj.sync"].delay("acme")
    second = app.tasks["proj.sync"].apply_async(("acme",), {"full": True})
    other = app.tasks["proj.sync"].delay("globex")
    assert second.id == first.id and other.id != first.id
    assert drain(app) == 2
    assert second.get(timeout=5) == "acme"
    again = app.tasks["proj.sync"].delay("acme")  # the key was released by the settle
    assert again.id != first.id


def test_bad_unique_options_are_refused_naming_them(app: Potatoq) -> None:
    with pytest.raises(ValueError, match="unique_for of 'proj.plain.nightly.' must be a positive number"):
        header(app, "proj.plain", unique_key="nightly", unique_for=0)
    with pytest.raises(InvalidName, match="unique key must be a non-empty string"):
        header(app, "proj.plain", unique_key="x" * 400)

    @app.task(name="proj.typo", unique={"keys": "x"})
    def typo() -> None:
        pass

    with pytest.raises(ValueError, match=r"unique of task 'proj.typo' has unknown options \['keys'\]"):
        header(app, "proj.typo")

    @app.task(name="proj.states", unique={"states": ("running",)})
    def states() -> None:
        pass

    with pytest.raises(ValueError, match="unique states of 'proj.states' must be"):
        header(app, "proj.states")


def test_a_broker_without_unique_tasks_refuses_a_unique_task(monkeypatch: pytest.MonkeyPatch) -> None:
    app = Potatoq("proj", broker=f"memory://{uuid.uuid4().hex}")
    without = dataclasses.replace(app.broker.capabilities, unique_tasks=False)
    monkeypatch.setattr(type(app.broker), "capabilities", without)
    with pytest.raises(ImproperlyConfigured, match="doesn't support unique tasks"):
        app.send_task("proj.x", unique_key="k")


def test_rabbitmq_without_a_redis_result_backend_refuses_a_unique_task_at_send() -> None:
    app = Potatoq("proj", broker=services.require("rabbitmq"))
    try:
        assert app.broker.capabilities.unique_tasks is True
        with pytest.raises(ImproperlyConfigured, match="unique tasks on RabbitMQ .* must be a Redis"):
            app.send_task("proj.x", unique_key="k")
    finally:
        app.close()


def test_on_rabbitmq_a_duplicate_returns_the_holders_result_until_it_has_run() -> None:
    app = Potatoq(
        "proj",
        broker=services.require("rabbitmq"),
        result_backend=services.require("redis"),
        broker_transport_options={"queue_prefix": f"t{uuid.uuid4().hex[:10]}_"},
    )
    key = uuid.uuid4().hex

    @app.task(name="proj.sync", unique={"key": lambda customer: f"{key}-{customer}"})
    def sync(customer: str) -> str:
        return customer

    try:
        first, again, other = sync.delay("acme"), sync.delay("acme"), sync.delay("globex")
        assert again.id == first.id and other.id != first.id
        assert drain(app, timeout=15) == 2
        assert first.get(timeout=5) == "acme"
        fresh = sync.delay("acme")  # the settle released the key
        assert fresh.id != first.id
        assert drain(app, timeout=15) == 1
    finally:
        app.broker.drop_all()  # type: ignore[attr-defined]
        app.close()


def test_a_unique_task_in_a_group_or_chain_is_refused_naming_it(app: Potatoq) -> None:
    from potatoq import chain, group

    sync, plain = app.tasks["proj.sync"], app.tasks["proj.plain"]
    with pytest.raises(ValueError, match="task 'proj.sync' is unique and can't be sent in a group"):
        group(sync.s("a"), sync.s("b")).apply_async()
    with pytest.raises(ValueError, match="task 'proj.sync' is unique and can't be sent in a chain"):
        chain(sync.s("a"), plain.si()).apply_async()
    assert drain(app) == 0
