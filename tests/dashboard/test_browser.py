"""The dashboard in a real headless Chromium: replay and purge by clicking, live refresh, and
no console error (a CSP violation is one) on any page."""

from __future__ import annotations

import time
import uuid
from typing import Any
from urllib.parse import quote

from potatoq import Potatoq
from potatoq.dashboard import Auth, create_app
from potatoq.testing import ThreadWorker, drain

from .browser import ConsoleProblems, browser, require_chromium, serve

TOKEN = "a-long-enough-token-0123456789"


def _dead_letters(app: Potatoq, *ids: str) -> list[str]:
    """Dead letters with these ids (made unique: conftest counts flaky's attempts per id)."""
    unique = uuid.uuid4().hex[:8]
    results = [app.tasks["demo.flaky"].apply_async(("x",), task_id=f"{i}-{unique}") for i in ids]
    drain(app)
    assert sorted(d.id for d in app.broker.list_dead()) == sorted(r.id for r in results)
    return [r.id for r in results]


def test_click_replay_and_the_task_completes(app: Potatoq) -> None:
    require_chromium()
    result = app.tasks["demo.flaky"].delay("x")
    drain(app)
    assert [d.id for d in app.broker.list_dead()] == [result.id]
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium, ThreadWorker(app, poll=0.2):
        page = chromium.new_page()
        console = ConsoleProblems(page)
        page.goto(f"{url}/dead")
        page.click(f'button.replay[data-id="{result.id}"]')  # one letter: no confirmation step
        page.wait_for_selector("text=replayed 1 dead letter")
        # The dead letter's FAILURE result stays until the replayed run stores its own:
        # wait for that run rather than read the old outcome.
        deadline = time.monotonic() + 20
        while result.state != "SUCCESS" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert result.get(timeout=1) == "ok"
        page.goto(f"{url}/tasks/{result.id}")
        assert page.inner_text(".state") == "SUCCESS"
        console.assert_none("replay one")


def test_replay_all_goes_through_the_confirmation_page(app: Potatoq) -> None:
    require_chromium()
    _dead_letters(app, "all-1", "all-2")
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page = chromium.new_page()
        console = ConsoleProblems(page)
        page.goto(f"{url}/dead")
        page.click("#replay-all")
        page.wait_for_selector("text=Replay all 2 dead letters?")
        assert len(app.broker.list_dead()) == 2  # nothing replayed before the second click
        console.assert_none("the confirmation page")
        page.click("#confirm")
        page.wait_for_selector("text=replayed 2 dead letters")
        assert app.broker.list_dead() == []
        console.assert_none("replay all")


def test_purge_asks_in_the_browser_first(app: Potatoq) -> None:
    require_chromium()
    _dead_letters(app, "purge-1")
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page = chromium.new_page()
        console = ConsoleProblems(page)
        page.goto(f"{url}/dead")
        questions: list[str] = []

        def answer(dialog: Any, accept: bool) -> None:
            questions.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        page.once("dialog", lambda d: answer(d, accept=False))
        page.click("#purge")
        assert questions == ["Delete every dead letter?"]  # dashboard.js ran under the CSP
        assert len(app.broker.list_dead()) == 1
        page.once("dialog", lambda d: answer(d, accept=True))
        page.click("#purge")
        page.wait_for_selector("text=purged 1 dead letter")
        assert app.broker.list_dead() == []
        console.assert_none("purge")


def test_set_a_limit_from_the_limits_page(app: Potatoq) -> None:
    require_chromium()
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page = chromium.new_page()
        console = ConsoleProblems(page)
        page.goto(f"{url}/limits")
        page.fill("#set-limit input[name=key]", "demo.add")
        page.fill("#set-limit input[name=limit]", "20/m")
        page.fill("#set-limit input[name=burst]", "4")
        page.click("#set")
        page.wait_for_selector("text=demo.add: at most 20/m, 4 at once")
        (usage,) = app.broker.rates()
        assert (usage.key, round(usage.rate * 60, 6), usage.burst) == ("demo.add", 20, 4)
        console.assert_none("set a rate")


def test_no_page_logs_a_console_error_or_csp_violation(app: Potatoq) -> None:
    require_chromium()
    (slashed,) = _dead_letters(app, "user/42/report")
    app.broker.set_limit("demo.add", 2)  # the Limits page with both tables
    app.broker.set_rate("demo.add", "5/s")
    pages = [
        "/",
        "/workers",
        "/dead",
        "/schedules",
        "/limits",
        "/history",
        f"/tasks/{quote(slashed, safe='')}",
        "/no-such-page",
    ]
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page = chromium.new_page()
        console = ConsoleProblems(page)
        for path in pages:
            response = page.goto(url + path)
            assert response is not None and response.status == (404 if path == "/no-such-page" else 200)
            if path == "/no-such-page":
                console.seen = [p for p in console.seen if "status of 404" not in p]
            page.wait_for_load_state("load")
            console.assert_none(path)
    with serve(create_app(app, sample_every=0, auth=Auth(token=TOKEN))) as url, browser() as chromium:
        page = chromium.new_page()
        console = ConsoleProblems(page)
        page.goto(f"{url}/dead")
        console.seen = [p for p in console.seen if "status of 401" not in p]  # the sign-in page itself
        page.fill("input[name=token]", TOKEN)
        page.click("button")
        page.wait_for_selector("text=Dead letters")
        assert page.url == f"{url}/dead"
        console.assert_none("sign in")


def test_overview_refreshes_without_a_reload(app: Potatoq) -> None:
    require_chromium()
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page: Any = chromium.new_page()
        console = ConsoleProblems(page)
        page.goto(url)
        page.evaluate("window.__same_document = true")  # lost on a full reload
        app.tasks["demo.add"].apply_async((1, 1), countdown=3600)
        delayed = "() => document.querySelectorAll('.card b')[1].textContent.trim() === '1'"
        page.wait_for_function(delayed, timeout=15000)  # the "delayed" card, after a fetch() refresh
        assert page.evaluate("window.__same_document") is True
        console.assert_none("live overview")
