"""The Limits page: concurrency and rate limits with their usage, read through the broker
calls ``potatoq limits`` uses, and set or cleared through its CSRF-checked form, on every
broker."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from potatoq import Potatoq
from potatoq.brokers.records import Delivery, WorkerRef
from potatoq.dashboard import create_app


def _token(page: str) -> str:
    return re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)  # type: ignore[union-attr]


def _row(page: str, table: str, key: str) -> str:
    """The ``<tr>`` of ``key`` in the table ``#table`` of the page."""
    body = page.split(f'<table id="{table}">', 1)[1].split("</table>", 1)[0]
    match = re.search(rf'<tr data-key="{re.escape(key)}">.*?</tr>', body, re.S)
    assert match, f"no row for {key!r} in #{table}:\n{body}"
    return match.group(0)


def _cell(row: str, name: str) -> str:
    match = re.search(rf'class="n {name}">([^<]*)', row)
    assert match, f"no {name} cell in {row}"
    return match.group(1).strip()


def _limited_tasks(app: Potatoq) -> None:
    @app.task(name="demo.export", concurrency_limit=1)
    def export() -> None:
        return None

    @app.task(name="demo.call_api", global_rate_limit="10/s", rate_burst=3)
    def call_api() -> None:
        return None


def _claim_one(app: Potatoq, name: str) -> Delivery:
    """Claim the first task of ``name`` as a worker would, so its key has one running."""
    deadline = time.monotonic() + 10  # a timeout only: RabbitMQ's consumer fills in the background
    while time.monotonic() < deadline:
        delivery = app.broker.claim(["default"], WorkerRef("dash-limits", os.getpid()))
        if delivery is not None:
            assert delivery.message is not None and delivery.message.task == name
            return delivery
        app.broker.wait(["default"], 0.2)
    raise AssertionError(f"no {name} claimed")


def test_the_page_lists_limits_and_their_usage(any_app: Potatoq) -> None:
    app = any_app
    _limited_tasks(app)
    for _ in range(2):
        app.tasks["demo.export"].delay()
    app.tasks["demo.call_api"].delay()
    # Brokers count a key's waiting tasks at different moments (some once a claim has parked
    # them), so the keys are also overridden: every broker lists an overridden key.
    app.broker.set_limit("demo.export", 1)
    app.broker.set_rate("demo.call_api", "10/s", burst=3)
    _claim_one(app, "demo.export")
    with TestClient(create_app(app, sample_every=0), base_url="http://127.0.0.1:5555") as client:
        page = client.get("/limits")
        assert page.status_code == 200, page.text
        assert '<a href="http://127.0.0.1:5555/limits">Limits</a>' in page.text  # in the nav
        limits = {u.key: u for u in app.broker.limits()}
        assert (limits["demo.export"].limit, limits["demo.export"].running) == (1, 1)
        for key, usage in limits.items():  # the page shows what `potatoq limits` shows
            row = _row(page.text, "limits", key)
            assert _cell(row, "limit").startswith(str(usage.limit))
            assert _cell(row, "running") == str(usage.running)
            assert _cell(row, "waiting") == str(usage.waiting)
        rates = {u.key: u for u in app.broker.rates()}
        assert (rates["demo.call_api"].rate, rates["demo.call_api"].burst) == (10, 3)
        for key, rate in rates.items():
            row = _row(page.text, "rates", key)
            assert _cell(row, "rate").startswith("10/s") and _cell(row, "burst") == str(rate.burst)
            assert _cell(row, "tokens") == f"{rate.tokens:.1f}"
            assert _cell(row, "waiting") == str(rate.waiting)


def test_setting_and_clearing_through_the_form(any_app: Potatoq) -> None:
    app = any_app
    with TestClient(create_app(app, sample_every=0), base_url="http://127.0.0.1:5555") as client:
        page = client.get("/limits").text
        assert "No concurrency limit in use." in page and 'id="set-limit"' in page
        done = client.post(
            "/limits/set", data={"csrf": _token(page), "action": "set", "key": "demo.add", "limit": "3"}
        )
        assert done.status_code == 200, done.text  # redirected back to the page
        assert "demo.add: at most 3 running" in done.text
        usage = {u.key: u for u in app.broker.limits()}["demo.add"]
        assert usage.limit == 3 and usage.override
        assert '<span class="badge">set</span>' in _row(done.text, "limits", "demo.add")

        form = {"csrf": _token(done.text), "action": "set", "key": "demo.add", "limit": "100/s", "burst": "5"}
        done = client.post("/limits/set", data=form)
        assert done.status_code == 200 and "demo.add: at most 100/s, 5 at once" in done.text
        rate = {u.key: u for u in app.broker.rates()}["demo.add"]
        assert (rate.rate, rate.burst, rate.override) == (100, 5, True)
        assert _cell(_row(done.text, "rates", "demo.add"), "burst") == "5"

        clear = {"csrf": _token(done.text), "action": "clear", "key": "demo.add"}
        done = client.post("/limits/set", data=clear)
        assert done.status_code == 200 and "demo.add: override cleared" in done.text
        assert not any(u.key == "demo.add" and u.override for u in app.broker.limits())
        assert not any(u.key == "demo.add" and u.override for u in app.broker.rates())


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"limit": "100/fortnight"}, "rate limit must look like &#39;100/s&#39;"),
        ({"limit": "100/s", "burst": "lots"}, "burst must be a positive whole number, got &#39;lots&#39;"),
        ({"limit": "100/s", "burst": "0"}, "must be a positive integer, got 0"),
        ({"limit": "0"}, "limit must be a positive whole number or a rate like 100/s, got &#39;0&#39;"),
        ({"limit": "3", "burst": "2"}, "burst applies to a rate like 100/s"),
        ({"key": "", "limit": "3"}, "give a limit key"),
    ],
)
def test_a_bad_value_shows_a_clear_error(app: Any, board: Any, fields: dict[str, str], error: str) -> None:
    client = board()
    form = {"csrf": _token(client.get("/limits").text), "action": "set", "key": "demo.add", **fields}
    refused = client.post("/limits/set", data=form)
    assert refused.status_code == 400
    assert '<p class="error" role="alert">' in refused.text and error in refused.text, refused.text
    assert 'name="limit" required value="' + fields["limit"] in refused.text  # kept to correct it
    assert app.broker.limits() == [] and app.broker.rates() == []


def test_a_read_only_dashboard_shows_limits_but_cannot_change_them(app: Any, board: Any) -> None:
    app.broker.set_limit("demo.add", 2)
    client = board(read_only=True)
    page = client.get("/limits").text
    assert _cell(_row(page, "limits", "demo.add"), "limit").startswith("2")
    assert 'id="set-limit"' not in page and "Clear</button>" not in page
    refused = client.post("/limits/set", data={"action": "set", "key": "demo.add", "limit": "9"})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert [(u.key, u.limit) for u in app.broker.limits()] == [("demo.add", 2)]


def test_a_post_without_the_csrf_token_is_refused(app: Any, board: Any) -> None:
    client = board()
    refused = client.post("/limits/set", data={"action": "set", "key": "demo.add", "limit": "9"})
    assert refused.status_code == 403 and "CSRF" in refused.text
    assert app.broker.limits() == []


def test_a_broker_without_limits_gets_a_note(app: Any, board: Any) -> None:
    # The brokers in the tree all enforce limits: take them away from this instance's
    # capabilities to see what a third-party broker without them gets.
    broker = app.broker
    without = dataclasses.replace(broker.capabilities, concurrency_limits=False, rate_limits=False)
    broker.capabilities = without
    client = board()
    page = client.get("/limits")
    assert page.status_code == 200
    assert "SQLiteBroker doesn&#39;t enforce concurrency limits." in page.text
    assert "doesn&#39;t enforce global rate limits." in page.text and 'id="set-limit"' not in page.text
    token = client.app.state.dashboard.csrf.token  # the page has no form to read it from
    form = {"csrf": token, "action": "set", "key": "demo.add", "limit": "3"}
    refused = client.post("/limits/set", data=form)
    assert refused.status_code == 400 and "doesn&#39;t enforce concurrency limits" in refused.text
