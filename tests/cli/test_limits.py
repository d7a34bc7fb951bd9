"""``potatoq limits``: usage of the concurrency limits, and changing one at run time."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, Complete, WorkerRef
from potatoq.metrics import broker_metrics, parse_exposition
from tests import services

from .conftest import Env, Run, as_json, run_cli

WORKER = WorkerRef("cli-test@host", 1)


def test_limits_show_usage_and_set_overrides_at_run_time(cli: Run, client: Any) -> None:
    app = client.app
    for n in range(3):
        app.tasks["proj.add"].apply_async((n, n), concurrency_limit=2)
    assert cli("limits", "--json").returncode == 0
    rows = as_json(cli("limits", "--json"))
    assert rows == [{"key": "proj.add", "limit": 2, "running": 0, "waiting": 3, "override": False}]
    assert "proj.add" in cli("limits").stdout

    done = cli("limits", "set", "proj.add", "5")
    assert (done.returncode, done.stdout.strip()) == (0, "proj.add: at most 5 running"), done.stderr
    assert as_json(cli("limits", "--json"))[0]["limit"] == 5
    assert app.broker.limits()[0].override is True

    values = parse_exposition(broker_metrics(app.broker))
    assert values[("potatoq_limit_waiting", (("key", "proj.add"),))] == 3
    assert values[("potatoq_limit_concurrency", (("key", "proj.add"),))] == 5
    assert values[("potatoq_limit_running", (("key", "proj.add"),))] == 0

    assert cli("limits", "clear", "proj.add").returncode == 0
    assert as_json(cli("limits", "--json"))[0]["limit"] == 2


def test_bad_limit_values_are_usage_errors_naming_them(cli: Run) -> None:
    bad = cli("limits", "set", "proj.add", "zero")
    assert (
        bad.returncode == 2
        and "limit must be a positive whole number or a rate like 100/s, got 'zero'" in bad.stderr
    )
    missing = cli("limits", "set")
    assert missing.returncode == 2 and "needs a KEY" in missing.stderr


def test_limits_show_rates_and_set_a_rate_at_run_time(cli: Run, client: Any) -> None:
    app = client.app
    for n in range(3):
        app.tasks["proj.add"].apply_async((n, n), global_rate_limit="1/m", rate_burst=2)
    queue = app.conf.task_default_queue
    for _ in range(4):  # two take the burst; the third now waits for its token
        delivery = app.broker.claim([queue], WORKER)
        if delivery is not None:
            app.broker.settle(delivery, Complete())
    rows = [r for r in as_json(cli("limits", "--json")) if "rate" in r]
    assert rows == [
        {
            "key": "proj.add",
            "rate": 1 / 60,
            "burst": 2,
            "tokens": rows[0]["tokens"],
            "waiting": 1,
            "override": False,
        }
    ]
    assert rows[0]["tokens"] < 1
    shown = cli("limits").stdout
    assert "RATE" in shown and "1/m" in shown

    values = parse_exposition(broker_metrics(app.broker))
    assert values[("potatoq_rate_waiting", (("key", "proj.add"),))] == 1
    assert values[("potatoq_rate_per_second", (("key", "proj.add"),))] == 1 / 60
    assert values[("potatoq_rate_burst", (("key", "proj.add"),))] == 2

    done = cli("limits", "set", "proj.add", "50/s", "--burst", "5")
    assert (done.returncode, done.stdout.strip()) == (0, "proj.add: at most 50/s, 5 at once"), done.stderr
    usage = {u.key: u for u in app.broker.rates()}["proj.add"]
    assert (usage.rate, usage.burst, usage.override) == (50.0, 5, True)
    assert cli("limits", "clear", "proj.add").returncode == 0
    assert not {u.key: u for u in app.broker.rates()}.get("proj.add", usage).override


def test_bad_rates_are_usage_errors_naming_them(cli: Run) -> None:
    bad = cli("limits", "set", "proj.add", "fast/s")
    assert bad.returncode == 2 and "must look like '100/s'" in bad.stderr


def test_limits_show_and_set_on_rabbitmq_with_a_redis_result_backend(tmp_path: Path) -> None:
    """RabbitMQ keeps limits in its result backend: the command and /metrics read them there."""
    tag = uuid.uuid4().hex[:10]
    backend = create_broker(BrokerConfig(url=services.require("redis")))
    config = BrokerConfig(
        url=services.require("rabbitmq"),
        transport_options={"queue_prefix": f"c{tag}_"},
        result_backend=backend,
    )
    environment = Env(tmp_path, config, name="rabbitmq")
    broker = create_broker(config)
    key, rated = f"proj.add[{tag}]", f"proj.mul[{tag}]"
    try:
        done = run_cli(environment, "limits", "set", key, "3")
        assert (done.returncode, done.stdout.strip()) == (0, f"{key}: at most 3 running"), done.stderr
        done = run_cli(environment, "limits", "set", rated, "10/s", "--burst", "4")
        assert done.returncode == 0, done.stderr
        rows = {row["key"]: row for row in as_json(run_cli(environment, "limits", "--json"))}
        assert rows[key] == {"key": key, "limit": 3, "running": 0, "waiting": 0, "override": True}
        assert (rows[rated]["rate"], rows[rated]["burst"], rows[rated]["override"]) == (10.0, 4, True)

        values = parse_exposition(broker_metrics(broker))
        assert values[("potatoq_limit_concurrency", (("key", key),))] == 3
        assert values[("potatoq_rate_per_second", (("key", rated),))] == 10.0

        assert run_cli(environment, "limits", "clear", key).returncode == 0
        assert run_cli(environment, "limits", "clear", rated).returncode == 0
        left = {row["key"] for row in as_json(run_cli(environment, "limits", "--json"))}
        assert key not in left and rated not in left
    finally:
        broker.drop_all()  # type: ignore[attr-defined]
        broker.close()
        backend.close()
