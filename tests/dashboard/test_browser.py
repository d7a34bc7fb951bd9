"""The dashboard in a real headless Chromium: replay a dead letter by clicking, live refresh."""

from __future__ import annotations

from typing import Any

from potatoq import Potatoq
from potatoq.dashboard import create_app
from potatoq.testing import ThreadWorker, drain

from .browser import browser, require_chromium, serve


def test_click_replay_and_the_task_completes(app: Potatoq) -> None:
    require_chromium()
    result = app.tasks["demo.flaky"].delay("x")
    drain(app)
    assert [d.id for d in app.broker.list_dead()] == [result.id]
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium, ThreadWorker(app, poll=0.2):
        page = chromium.new_page()
        page.goto(f"{url}/dead")
        page.click(f'button.replay[data-id="{result.id}"]')
        page.wait_for_selector("text=replayed 1 dead letter")
        assert result.get(timeout=20) == "ok"
        page.goto(f"{url}/tasks/{result.id}")
        assert page.inner_text(".state") == "SUCCESS"


def test_overview_refreshes_without_a_reload(app: Potatoq) -> None:
    require_chromium()
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page: Any = chromium.new_page()
        page.goto(url)
        page.evaluate("window.__same_document = true")  # lost on a full reload
        app.tasks["demo.add"].apply_async((1, 1), countdown=3600)
        delayed = "() => document.querySelectorAll('.card b')[1].textContent.trim() === '1'"
        page.wait_for_function(delayed, timeout=15000)  # the "delayed" card, after a fetch() refresh
        assert page.evaluate("window.__same_document") is True
