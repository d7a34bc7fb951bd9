"""Which global rate limit a call carries (potatoq/limits.py, the ``rl`` header): task
options, apply_async options, the task_limits setting, and bad values named."""

from __future__ import annotations

import dataclasses

import pytest

from potatoq import Potatoq
from potatoq.brokers.limits import RATE_HEADER, parse_rate
from potatoq.exceptions import ImproperlyConfigured
from potatoq.testing import drain


@pytest.fixture
def app() -> Potatoq:
    app = Potatoq("proj", broker="memory://rates-api")
    app.conf.task_limits = {"proj.report": {"rate": "30/m", "burst": 4}}

    @app.task(
        name="proj.call", global_rate_limit="10/s", rate_burst=3, rate_key=lambda customer, **_: customer
    )
    def call(customer: str, full: bool = False) -> str:
        return customer

    @app.task(name="proj.report")
    def report() -> None:
        pass

    @app.task(name="proj.plain", rate_limit="5/s")  # Celery's per-worker limit: no header
    def plain() -> None:
        pass

    return app


def header(app: Potatoq, name: str, *args: object, **options: object) -> object:
    return app.make_message(name, args, **options).headers.get(RATE_HEADER)


def test_rates_parse_per_second_minute_and_hour() -> None:
    assert parse_rate("100/s") == 100.0
    assert parse_rate("30/m") == 0.5
    assert parse_rate("36/h") == 0.01
    assert parse_rate(2) == 2.0
    assert parse_rate("7") == 7.0


def test_a_task_option_with_a_key_function_gives_each_key_its_rate(app: Potatoq) -> None:
    assert header(app, "proj.call", "acme") == ["proj.call[acme]", 10.0, 3]
    assert (
        app.make_message("proj.call", ("acme",), {"full": True}).headers[RATE_HEADER][0] == "proj.call[acme]"
    )


def test_apply_async_options_override_the_task_and_the_setting_names_by_task(app: Potatoq) -> None:
    assert header(app, "proj.call", "acme", global_rate_limit="1/h", rate_key="z") == [
        "proj.call[z]",
        1 / 3600,
        3,
    ]
    assert header(app, "proj.report") == ["proj.report", 0.5, 4]
    assert header(app, "proj.plain") is None  # rate_limit stays Celery's, per worker
    sent = app.tasks["proj.plain"].apply_async(global_rate_limit="2/s")
    queued = app.broker.queued_task(sent.id)
    assert queued is not None and queued.message is not None
    assert queued.message.headers[RATE_HEADER] == ["proj.plain", 2.0, 1]


def test_bad_rates_are_refused_naming_them(app: Potatoq) -> None:
    with pytest.raises(ValueError, match=r"rate limit of 'proj.plain' must look like '100/s'"):
        header(app, "proj.plain", global_rate_limit="fast")
    with pytest.raises(ValueError, match=r"more than 0 tasks per second"):
        header(app, "proj.plain", global_rate_limit="0/s")
    with pytest.raises(ValueError, match=r"rate burst of 'proj.plain' must be a positive integer"):
        header(app, "proj.plain", global_rate_limit="1/s", rate_burst=0)
    app.conf.task_limits = {"proj.plain": {"rate": "1/s", "bust": 2}}
    with pytest.raises(ValueError, match=r"task_limits\['proj.plain'\] has unknown options \['bust'\]"):
        header(app, "proj.plain")


def test_rate_limited_tasks_run_through_the_memory_broker(app: Potatoq) -> None:
    results = [app.tasks["proj.call"].apply_async((c,), global_rate_limit="1000/s") for c in ("a", "b", "a")]
    drain(app)
    assert [r.get(timeout=5) for r in results] == ["a", "b", "a"]


def test_a_broker_without_rate_limits_refuses_a_rate_limited_task(monkeypatch: pytest.MonkeyPatch) -> None:
    app = Potatoq("proj", broker="memory://rates-refused")
    without = dataclasses.replace(app.broker.capabilities, rate_limits=False)
    monkeypatch.setattr(type(app.broker), "capabilities", without)
    with pytest.raises(ImproperlyConfigured, match="doesn't enforce global rate limits"):
        app.send_task("proj.x", global_rate_limit="1/s")


def test_rabbitmq_without_a_result_backend_refuses_a_rate_limited_task_when_it_is_sent() -> None:
    app = Potatoq("proj", broker="amqp://guest:guest@127.0.0.1:1//")  # refused before connecting
    with pytest.raises(
        ImproperlyConfigured, match="limits on RabbitMQ .* must be a Redis, PostgreSQL or SQLite URL"
    ):
        app.send_task("proj.x", global_rate_limit="1/s")
