"""Replay a dead letter through the dashboard's POST form and see the task complete, on every broker."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from potatoq.brokers import broker_class
from potatoq.dashboard import create_app
from potatoq.testing import drain
from tests import services
from tests.conftest import FACTORIES, FactoryContext

from .conftest import make_app


@pytest.fixture(params=list(FACTORIES))
def any_app(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    module = FACTORIES[request.param]
    if getattr(module, "SERVICE", None):
        services.require(module.SERVICE)
    ctx = FactoryContext(tmp_path=tmp_path, unique=f"d{uuid.uuid4().hex[:10]}", overrides={})
    config = module.make_config(ctx)
    capabilities = broker_class(config.url).capabilities
    backend = None
    if config.result_backend is not None:
        backend = config.result_backend.config.url
    elif not capabilities.results_by_default:
        backend = "broker"  # Redis: results opt-in; the test reads them
    app = make_app(
        config.url, result_backend=backend, broker_transport_options=dict(config.transport_options)
    )
    yield app
    app.close()
    for fn in reversed(ctx.finalizers):
        fn()


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
