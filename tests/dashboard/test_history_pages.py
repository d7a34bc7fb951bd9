"""The history page, its JSON endpoints and the task page's deliveries, read from task history."""

from __future__ import annotations

import re
from typing import Any

from potatoq import Potatoq
from potatoq.testing import drain


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr class="record" data-id="([^"]+)"', html)


def test_history_lists_finished_tasks_with_filters(app: Potatoq, board: Any) -> None:
    added = [app.tasks["demo.add"].delay(i, 1) for i in range(3)]
    flaky = app.tasks["demo.flaky"].delay("hunter2")
    drain(app)
    client = board()
    page = client.get("/history")
    assert page.status_code == 200
    assert set(_rows(page.text)) == {r.id for r in added} | {flaky.id}
    assert "<svg" in page.text and "latency p50 / p95" in page.text

    assert _rows(client.get("/history", params={"name": "demo.flaky"}).text) == [flaky.id]
    assert _rows(client.get("/history", params={"state": "dead"}).text) == [flaky.id]
    assert _rows(client.get("/history", params={"text": "ON PURPOSE"}).text) == [flaky.id]
    assert _rows(client.get("/history", params={"queue": "nowhere"}).text) == []
    assert "first attempt fails on purpose" in page.text


def test_history_pages_walk_older_records(app: Potatoq, board: Any) -> None:
    sent = [app.tasks["demo.add"].delay(i, i) for i in range(5)]
    drain(app)
    client = board()
    seen: list[str] = []
    url: str | None = "/history?limit=2&name=demo.add"
    sizes = []
    while url:
        html = client.get(url).text
        sizes.append(len(_rows(html)))
        seen += _rows(html)
        found = re.search(r'<a id="next" href="([^"]+)"', html)
        url = found.group(1).replace("&amp;", "&") if found else None
        assert url is None or "name=demo.add" in url  # filters carried to the next page
    assert sizes == [2, 2, 1]
    assert seen == [r.id for r in reversed(sent)]

    body = client.get("/history.json", params={"limit": "3"}).json()
    assert [r["task_id"] for r in body["records"]] == seen[:3] and body["next_cursor"]
    rest = client.get("/history.json", params={"limit": "3", "cursor": body["next_cursor"]}).json()
    assert [r["task_id"] for r in rest["records"]] == seen[3:] and rest["next_cursor"] is None


def test_bad_filters_are_named(app: Potatoq, board: Any) -> None:
    client = board()
    page = client.get("/history", params={"since": "yesterday"})
    assert page.status_code == 200 and "since=&#39;yesterday&#39; is not a time" in page.text
    assert client.get("/history.json", params={"state": "DONE"}).status_code == 400
    assert "limit=&#39;0&#39; must be" in client.get("/history", params={"limit": "0"}).text
    assert "not one this broker issued" in client.get("/history", params={"cursor": "x"}).text


def test_series_json_counts_finished_tasks(app: Potatoq, board: Any) -> None:
    for i in range(4):
        app.tasks["demo.add"].delay(i, 1)
    drain(app)
    series = board().get("/history/series.json").json()
    assert sum(series["finished"]) == 4 and series["records"] == 4
    assert any(v is not None for v in series["runtime_p50"])
    assert any(v is not None for v in series["latency_p95"])


def test_task_page_follows_a_task_through_its_retries(app: Potatoq, board: Any) -> None:
    result = app.tasks["demo.flaky"].delay("x")
    drain(app)
    app.broker.retry_dead([result.id])
    drain(app)
    html = board().get(f"/tasks/{result.id}").text
    states = re.findall(r'<tr class="delivery"><td>[^<]*</td><td><span class="state \w+">(\w+)<', html)
    assert states == ["SUCCESS", "DEAD"]


def test_redacted_dashboard_hides_previews_and_messages(app: Potatoq, board: Any) -> None:
    app.tasks["demo.flaky"].delay("hunter2")
    drain(app)
    html = board(redact_args=True).get("/history").text
    assert "on purpose" not in html and "[redacted]" in html and "RuntimeError" in html


def test_an_empty_page_with_more_to_read_links_older(app: Potatoq, board: Any, monkeypatch: Any) -> None:
    """A rare filter reads a bounded number of records per page: a page can come back empty
    with a cursor, and says so with a link to read on rather than "none match"."""
    from potatoq.brokers import history_sql
    from potatoq.brokers.redis import history as redis_history

    monkeypatch.setattr(history_sql, "SCAN_MAX", 2)
    monkeypatch.setattr(redis_history, "SCAN_MAX", 2)
    flaky = app.tasks["demo.flaky"].delay("x")
    drain(app)
    for i in range(4):
        app.tasks["demo.add"].delay(i, 1)
    drain(app)
    client = board()
    # the queue drives the page (text alone walks only the records with an exception)
    url: str | None = "/history?queue=default&text=on+purpose&limit=1"
    found: list[str] = []
    pages = 0
    while url is not None and pages < 20:
        html = client.get(url).text
        pages += 1
        found += _rows(html)
        if not _rows(html) and 'id="next"' in html:
            assert "older ones are still to read" in html
        link = re.search(r'<a id="next" href="([^"]+)"', html)
        url = link[1].replace("&amp;", "&") if link else None
    assert found == [flaky.id] and pages > 1
