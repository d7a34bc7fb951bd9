"""A waiting task's page in a real headless Chromium, on every broker: the queued message
where the broker can look it up, a clear note where it can't (RabbitMQ), and the page
turning to SUCCESS by itself once a worker ran it."""

from __future__ import annotations

from typing import Any

from potatoq import Potatoq
from potatoq.dashboard import create_app
from potatoq.testing import drain

from .browser import browser, require_chromium, serve

TIMEOUT_MS = 20000  # an upper bound for a live refresh (every 3 s) on a loaded machine


def _facts(page: Any, selector: str = "dl.queued") -> dict[str, str]:
    """The <dt>/<dd> pairs of a facts list, as text."""
    pairs: dict[str, str] = page.evaluate(
        """sel => Object.fromEntries([...document.querySelectorAll(sel + ' dt')]
                 .map(dt => [dt.textContent.trim(), dt.nextElementSibling.textContent.trim()]))""",
        selector,
    )
    return pairs


def test_a_waiting_task_shows_its_queued_message(any_app: Potatoq) -> None:
    require_chromium()
    app = any_app
    add = app.tasks["demo.add"]
    later = add.apply_async((2, 3), {}, countdown=3600, priority=7, queue="slow")
    chained = (add.s(1, 2).set(countdown=3600) | add.s(10)).apply_async()
    first_id, second_id = chained.parent.id, chained.id
    finds = app.broker.capabilities.finds_queued
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page = chromium.new_page()
        page.goto(f"{url}/tasks/{later.id}")
        assert page.inner_text(".state") == "PENDING"
        if not finds:
            note = page.inner_text(".waiting-unknown")
            assert note.startswith("Waiting in RabbitMQ; details not available until it runs.")
            assert page.query_selector("dl.queued") is None
            return
        facts = _facts(page)
        assert facts["status"].startswith("scheduled, due ")
        assert (facts["queue"], facts["priority"], facts["deliveries"]) == ("slow", "7", "0")
        assert facts["ETA"].endswith(" UTC")
        assert page.inner_text("dd.name") == "demo.add"
        assert page.inner_text("code.args") == "(2, 3)"
        assert page.query_selector(".waiting-unknown") is None

        page.goto(f"{url}/tasks/{first_id}")
        assert _facts(page)["next in chain"] == f"{second_id} (demo.add)"
        page.click(f'dl.queued a[href$="/tasks/{second_id}"]')
        page.wait_for_url(f"**/tasks/{second_id}")
        # The second link of a chain is only sent once the first has run: not in the broker yet.
        assert page.inner_text(".state") == "PENDING" and page.query_selector("dl.queued") is None


def test_a_waiting_task_page_turns_to_success_without_a_reload(any_app: Potatoq) -> None:
    require_chromium()
    app = any_app
    waiting = app.tasks["demo.add"].delay(20, 22)
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page = chromium.new_page()
        page.goto(f"{url}/tasks/{waiting.id}")
        page.evaluate("window.__same_document = true")  # lost on a full reload
        assert page.inner_text(".state") == "PENDING"
        if app.broker.capabilities.finds_queued:
            assert _facts(page)["status"].startswith("ready since ")
        drain(app)
        assert waiting.get(timeout=20) == 42
        page.wait_for_function(
            "() => document.querySelector('.state').textContent.trim() === 'SUCCESS'", timeout=TIMEOUT_MS
        )
        assert page.evaluate("window.__same_document") is True
        assert page.query_selector("dl.queued") is None  # done: it has left the broker
        assert page.inner_text("main pre") == "42"


def test_a_waiting_tasks_arguments_are_redacted(any_app: Potatoq) -> None:
    require_chromium()
    app = any_app
    waiting = app.tasks["demo.flaky"].apply_async(("hunter2",), countdown=3600)
    with serve(create_app(app, sample_every=0, redact_args=True)) as url, browser() as chromium:
        page = chromium.new_page()
        page.goto(f"{url}/tasks/{waiting.id}")
        assert "hunter2" not in page.content()
        if app.broker.capabilities.finds_queued:
            assert page.inner_text("code.args") == "[redacted]"
            assert page.inner_text("dd.name") == "demo.flaky"
