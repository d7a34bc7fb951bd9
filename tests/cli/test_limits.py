"""``potatoq limits``: usage of the concurrency limits, and changing one at run time."""

from __future__ import annotations

from typing import Any

from potatoq.metrics import broker_metrics, parse_exposition

from .conftest import Run, as_json


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
    assert bad.returncode == 2 and "limit must be a positive whole number, got 'zero'" in bad.stderr
    missing = cli("limits", "set")
    assert missing.returncode == 2 and "needs a KEY" in missing.stderr
