"""Replay a dead letter through the dashboard's POST form and see the task complete, on every broker."""

from __future__ import annotations

import re
from typing import Any

from starlette.testclient import TestClient

from potatoq.dashboard import create_app
from potatoq.testing import drain


def test_replay_one_dead_letter_and_it_completes(any_app: Any) -> None:
    app = any_app
    result = app.tasks["demo.flaky"].delay("x")
    drain(app)
    assert [d.id for d in app.broker.list_dead()] == [result.id]
    with TestClient(create_app(app, sample_every=0), base_url="http://127.0.0.1:5555") as client:
        page = client.get("/dead").text
        assert result.id in page
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)  # type: ignore[union-attr]
        replayed = client.post("/dead/replay", data={"csrf": token, "id": result.id}, follow_redirects=True)
        assert replayed.status_code == 200 and "replayed 1 dead letter" in replayed.text
        assert app.broker.list_dead() == []
        drain(app)
        assert result.get(timeout=10) == "ok"
        task_page = client.get(f"/tasks/{result.id}").text
        assert "SUCCESS" in task_page and "No dead letters" in client.get("/dead").text
