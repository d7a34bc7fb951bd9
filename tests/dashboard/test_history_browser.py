"""The history pages in a real headless Chromium: filtering, paging, live rows, the task page."""

from __future__ import annotations

from typing import Any

from potatoq import Potatoq
from potatoq.dashboard import create_app
from potatoq.testing import drain

from .browser import browser, require_chromium, serve


def test_filter_and_page_through_history(app: Potatoq) -> None:
    require_chromium()
    sent = [app.tasks["demo.add"].delay(i, 1) for i in range(3)]
    flaky = app.tasks["demo.flaky"].delay("x")
    drain(app)
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page: Any = chromium.new_page()
        page.goto(f"{url}/history?limit=2")
        assert page.locator("tr.record").count() == 2
        assert page.locator("svg.chart").count() == 3
        page.click("#next")
        page.wait_for_url("**cursor=**")
        assert page.locator("tr.record").count() == 2
        page.goto(f"{url}/history")
        page.select_option("select[name=state]", "DEAD")
        page.click("#apply")
        page.wait_for_url("**state=DEAD**")
        assert [page.locator("tr.record").first.get_attribute("data-id")] == [flaky.id]
        assert page.locator("tr.record").count() == 1
        page.click(f'tr.record[data-id="{flaky.id}"] a')
        page.wait_for_selector("#deliveries")
        assert page.inner_text("#deliveries .state") == "DEAD"
    assert len(sent) == 3


def test_history_shows_new_records_without_a_reload(app: Potatoq) -> None:
    require_chromium()
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page: Any = chromium.new_page()
        page.goto(f"{url}/history")
        assert page.locator("tr.record").count() == 0
        page.evaluate("window.__same_document = true")  # lost on a full reload
        result = app.tasks["demo.add"].delay(2, 2)
        drain(app)
        page.wait_for_selector(f'tr.record[data-id="{result.id}"]', timeout=15000)
        assert page.evaluate("window.__same_document") is True


def test_switching_the_chart_window_keeps_the_filter_and_the_live_updates(app: Potatoq) -> None:
    require_chromium()
    app.tasks["demo.add"].delay(1, 1)
    drain(app)
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page: Any = chromium.new_page()
        page.goto(f"{url}/history?name=demo.add")
        assert page.inner_text("#chart-window") == "Last hour: demo.add"
        assert page.get_attribute("#window-1h", "aria-current") == "true"
        page.click("#window-7d")
        page.wait_for_url("**window=7d**")
        assert "name=demo.add" in page.url  # the filter stays
        assert page.inner_text("#chart-window") == "Last 7 days: demo.add"
        assert page.get_attribute("#window-7d", "aria-current") == "true"
        assert "per 2 hours" in page.text_content("svg.chart >> nth=0")
        assert "from 1 history record" in page.inner_text("p.meta")
        page.evaluate("window.__same_document = true")  # lost on a full reload
        result = app.tasks["demo.add"].delay(2, 2)
        drain(app)
        page.wait_for_selector(f'tr.record[data-id="{result.id}"]', timeout=15000)
        assert page.inner_text("#chart-window") == "Last 7 days: demo.add"  # still the 7-day window
        assert "from 2 history records" in page.inner_text("p.meta")
        assert page.evaluate("window.__same_document") is True
