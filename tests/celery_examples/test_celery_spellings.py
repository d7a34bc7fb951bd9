"""What Celery code names and spells, after the find-and-replace: queue ``celery``, kombu's
and SQLAlchemy's URLs, ``rpc://`` on a broker that stores no results, and Celery's names
(``uuid``, ``app.amqp.queues``, ``app.control.shutdown()``, ``potatoq control …``, settings
that are accepted and ignored). Real services: SQLite, PostgreSQL and RabbitMQ 4.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from potatoq import Potatoq
from potatoq.cli import split_queues
from potatoq.testing import drain
from potatoq.urls import normalize_url
from potatoq.worker import WorkerOptions
from tests import services
from tests.factories.postgres import drop_schema

ROOT = Path(__file__).parents[2]


@pytest.fixture(autouse=True)
def _no_env_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "POTATOQ_BROKER_URL",
        "CELERY_BROKER_URL",
        "POTATOQ_RESULT_BACKEND",
        "CELERY_RESULT_BACKEND",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Potatoq]:
    made = Potatoq("spell", broker=f"sqlite:///{tmp_path / 'broker.sqlite3'}")
    yield made
    made.close()


# -- queue "celery" ------------------------------------------------------------------------------


def test_celery_is_the_default_queue_wherever_a_queue_is_named(app: Potatoq) -> None:
    app.conf.task_routes = {"spell.routed": {"queue": "celery"}}

    @app.task(name="spell.routed")
    def routed() -> int:
        return 1

    @app.task(name="spell.named", queue="celery")
    def named() -> int:
        return 2

    sent = [routed.delay(), named.delay(), app.send_task("spell.named", queue="celery")]
    stats = {s.queue: s for s in app.broker.queue_stats()}
    assert set(stats) == {"default"}
    assert WorkerOptions.from_app(app, queues=split_queues(["hipri,celery"])).queues == ("hipri", "default")
    assert drain(app, queues=["default"]) == 3
    assert [r.get(timeout=10) for r in sent] == [1, 2, 2]


# -- URLs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("celery", "potatoq"),
    [
        ("amqp://guest:guest@host:5672//", "amqp://guest:guest@host:5672/%2F"),
        ("pyamqp://guest@host//", "amqp://guest@host/%2F"),
        ("amqp://host//staging", "amqp://host/%2Fstaging"),
        ("amqp://host/staging", "amqp://host/staging"),
        ("db+sqlite:///results.sqlite", "sqlite:///results.sqlite"),
        ("db+postgresql+psycopg2://u:p@h/db", "postgresql://u:p@h/db"),
        ("redis+socket:///run/redis.sock", "unix:///run/redis.sock"),
        ("redis://h:6379/0", "redis://h:6379/0"),
    ],
)
def test_kombu_and_sqlalchemy_spellings(celery: str, potatoq: str) -> None:
    assert normalize_url(celery) == potatoq


@pytest.mark.parametrize("scheme", ["amqp", "pyamqp"])
def test_vhost_slash_spelled_as_kombu_does(scheme: str, tmp_path: Path) -> None:
    """``amqp://…//`` is vhost ``/``; pika alone reads an empty vhost, which RabbitMQ refuses."""
    parts = urlsplit(services.require("rabbitmq"))
    url = urlunsplit((scheme, parts.netloc, "//", "", ""))
    app = Potatoq(
        "spell",
        broker=url,
        result_backend=f"sqlite:///{tmp_path / 'results.sqlite3'}",
        broker_transport_options={"queue_prefix": f"spell{uuid.uuid4().hex[:8]}_", "confirm_publish": True},
    )
    try:
        app.send_task("spell.nothing")
        assert sum(s.waiting for s in app.broker.queue_stats() if s.queue == "default") == 1
    finally:
        app.broker.drop_all()  # type: ignore[attr-defined]
        app.close()


def test_db_postgresql_result_backend_stores_in_postgres(app: Potatoq) -> None:
    url = services.require("postgres")
    schema = f"pq_spell_{uuid.uuid4().hex[:10]}"
    parts = urlsplit(url)
    app.conf.result_backend = urlunsplit(("db+postgresql+psycopg2", parts.netloc, parts.path, "", ""))
    app.conf.result_backend_transport_options = {"schema": schema}
    app.close()
    try:

        @app.task(name="spell.mul")
        def mul(x: int, y: int) -> int:
            return x * y

        result = mul.delay(6, 7)
        drain(app)
        assert result.get(timeout=10) == 42
        assert type(app.backend).__name__ == "PostgresBroker"
    finally:
        app.close()
        drop_schema(url, schema)


def test_a_celery_only_result_backend_is_named_as_one(app: Potatoq) -> None:
    from potatoq.exceptions import ImproperlyConfigured

    app.conf.result_backend = "cache+memcached://127.0.0.1:11211/"
    app.close()
    with pytest.raises(ImproperlyConfigured, match="unknown result backend URL scheme"):
        _ = app.backend


def test_rpc_backend_on_rabbitmq_stops_the_worker_at_start() -> None:
    """RabbitMQ stores no results: ``rpc://`` there would leave every ``get()`` and chord
    without one, so the worker refuses to start, in one line saying what to set."""
    url = services.require("rabbitmq")
    proc = subprocess.run(
        [sys.executable, "-m", "potatoq.cli", "-b", url, "--result-backend", "rpc://", "worker", "-c", "1"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "result_backend='rpc://'" in lines[0] and "postgresql://" in lines[0]


# -- names --------------------------------------------------------------------------------------


def test_celery_names_exist(app: Potatoq) -> None:
    from potatoq import current_task
    from potatoq import uuid as new_uuid

    assert uuid.UUID(new_uuid()).version == 7  # the ids potatoq makes (docs/migrating-from-celery.md)
    assert not current_task
    app.conf.task_queues = [type("Queue", (), {"name": "hipri"})()]
    assert set(app.amqp.queues) == {"default", "hipri"}
    assert app.amqp.queues["hipri"].name == "hipri"
    assert app.conf.task_acks_late is False and app.conf.worker_prefetch_multiplier == 4
    app.conf.task_acks_late = True
    assert app.conf.task_acks_late is True
    with pytest.raises(NotImplementedError, match="SIGTERM"):
        app.control.shutdown()
    with pytest.raises(NotImplementedError, match="-Q"):
        app.control.add_consumer("hipri")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["control", "shutdown"], "SIGTERM"),
        (["control", "add_consumer", "hipri"], "-Q"),
        (["control", "cancel_consumer", "hipri"], "-Q"),
        (["control", "frobnicate"], "unknown control command"),
        (["events"], "potatoq status"),
    ],
)
def test_control_and_events_commands_answer_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from potatoq.cli import main

    assert main(["-b", "memory://control", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_autodiscovery_without_a_package_list_waits_for_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in Celery: ``autodiscover_tasks()`` (packages from an integration) and a callable
    list run at ``finalize()``, when the project (Django) is set up, not at import."""
    package = tmp_path / f"disc{uuid.uuid4().hex[:6]}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(
        f"from potatoq import shared_task\n\n@shared_task(name='{package.name}.t')\ndef t():\n    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    app = Potatoq("disc", broker="memory://disc")
    asked: list[str] = []
    app.autodiscover_tasks()
    app.autodiscover_tasks(lambda: asked.append("callable") or [package.name], related_name="tasks")
    app.discovery_packages = lambda: asked.append("integration") or [package.name]
    assert asked == [] and f"{package.name}.t" not in app.tasks
    app.finalize()
    assert asked == ["integration", "callable"] and f"{package.name}.t" in app.tasks
