"""Pause and resume a queue from the dashboard's overview, and see it there and in /metrics,
on every broker."""

from __future__ import annotations

import re
from typing import Any

from starlette.testclient import TestClient

from potatoq.dashboard import create_app
from potatoq.metrics import parse_exposition

PAUSED = ("potatoq_queue_paused", (("queue", "default"),))


def _token(page: str) -> str:
    return re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)  # type: ignore[union-attr]


def test_pause_and_resume_from_the_overview(any_app: Any) -> None:
    app = any_app
    app.tasks["demo.add"].delay(1, 2)
    with TestClient(create_app(app, sample_every=0), base_url="http://127.0.0.1:5555") as client:
        page = client.get("/").text
        assert 'data-queue="default">Pause</button>' in page and "badge paused" not in page
        assert parse_exposition(client.get("/metrics").text)[PAUSED] == 0
        done = client.post(
            "/queues/pause", data={"csrf": _token(page), "queue": "default", "action": "pause"}
        )
        assert done.status_code == 200, done.text  # redirected to the overview
        assert '<span class="badge paused">paused</span>' in done.text
        assert 'data-queue="default">Resume</button>' in done.text
        assert set(app.control.paused_queues()) == {"default"}
        assert parse_exposition(client.get("/metrics").text)[PAUSED] == 1
        client.post("/queues/pause", data={"csrf": _token(done.text), "queue": "default", "action": "resume"})
        assert app.control.paused_queues() == {}
        assert parse_exposition(client.get("/metrics").text)[PAUSED] == 0


def test_bad_pause_requests_are_refused(app: Any, board: Any) -> None:
    app.tasks["demo.add"].delay(1, 2)  # a queue row, with its form
    client = board()
    token = _token(client.get("/").text)
    bad_action = client.post("/queues/pause", data={"csrf": token, "queue": "default", "action": "stop"})
    assert bad_action.status_code == 400 and "action must be pause or resume" in bad_action.text
    bad_name = client.post("/queues/pause", data={"csrf": token, "queue": "a b", "action": "pause"})
    assert bad_name.status_code == 400 and "invalid queue name" in bad_name.text
    no_csrf = client.post("/queues/pause", data={"queue": "default", "action": "pause"})
    assert no_csrf.status_code == 403
    assert app.control.paused_queues() == {}


def test_a_read_only_dashboard_shows_a_pause_but_cannot_change_it(app: Any, board: Any) -> None:
    app.control.pause_queue("default")
    client = board(read_only=True)
    page = client.get("/").text
    assert '<span class="badge paused">paused</span>' in page and "Resume</button>" not in page
    refused = client.post("/queues/pause", data={"queue": "default", "action": "resume"})
    assert refused.status_code == 403
    assert set(app.control.paused_queues()) == {"default"}
