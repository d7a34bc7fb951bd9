"""A potatoq app on a temp SQLite file (or on every broker: ``any_app``) with a few tasks,
and TestClients for its dashboard."""

from __future__ import annotations

import collections
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from potatoq import Potatoq
from potatoq.brokers import broker_class
from potatoq.dashboard import create_app
from tests import services
from tests.conftest import FACTORIES, FactoryContext
from tests.worker.conftest import client, env  # noqa: F401 - real worker fixtures for test_metrics

#: task id -> how many times ``flaky`` ran it (it fails the first time)
ATTEMPTS: collections.Counter[str] = collections.Counter()


def define_tasks(app: Potatoq) -> None:
    @app.task(name="demo.add")
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="demo.flaky", bind=True)
    def flaky(self: Any, secret: str) -> str:
        ATTEMPTS[self.request.id] += 1
        if ATTEMPTS[self.request.id] == 1:
            raise RuntimeError("first attempt fails on purpose")
        return "ok"

    @app.task(name="demo.parent")
    def parent() -> str:
        return "parent done"


def make_app(broker: str, result_backend: str | None = None, **settings: Any) -> Potatoq:
    app = Potatoq(
        f"dash{uuid.uuid4().hex[:6]}",
        broker=broker,
        result_backend=result_backend,
        set_as_current=False,
        **settings,
    )
    define_tasks(app)
    return app


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Potatoq]:
    application = make_app(f"sqlite:///{tmp_path / 'broker.sqlite3'}", result_extended=True)
    application.conf.beat_schedule = {"tick": {"task": "demo.add", "schedule": 30.0, "args": (1, 2)}}
    yield application
    application.close()


@pytest.fixture
def board(app: Potatoq) -> Iterator[Callable[..., TestClient]]:
    """``board(**create_app options)`` → a TestClient on the dashboard of ``app``."""
    clients: list[TestClient] = []

    def make(**options: Any) -> TestClient:
        options.setdefault("sample_every", 0)  # tests take samples themselves
        made = TestClient(create_app(app, **options), base_url="http://127.0.0.1:5555")
        clients.append(made)
        return made

    yield make
    for made in clients:
        made.close()


@pytest.fixture(params=list(FACTORIES))
def any_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Potatoq]:
    """The demo tasks' app once per broker of ``tests/factories`` (skipped if unreachable)."""
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
