"""Celery's documented Django layout, after the migration guide's sed, against real workers.

``django_proj`` keeps ``proj/celery.py`` as Celery documents it (``Celery('proj')``,
``config_from_object('django.conf:settings', namespace='CELERY')``,
``autodiscover_tasks()``), two Django apps with ``@shared_task`` tasks, and *no*
``potatoq.contrib.django`` in ``INSTALLED_APPS``. The worker is started as Celery's docs say,
``potatoq -A proj worker``, from the project directory; tasks are sent from ``manage.py
shell``. Brokers: SQLite and PostgreSQL (the project's database server), Redis and RabbitMQ
(``amqp://…//`` with Celery's ``db+sqlite://`` result backend, as Celery's Django example).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests import services
from tests.integrations.djangoproject import postgres_database

pytest.importorskip("django")

PROJECT = Path(__file__).parent / "django_proj"
ROOT = Path(__file__).parents[2]
DEADLINE = 60.0

SEND = """
import json
from django.contrib.auth.models import User
from orders.tasks import add, count_users, time_zone
from billing.tasks import total, on_celery_queue
User.objects.create(username="ada"); User.objects.create(username="grace")
results = {
    "add": add.delay(2, 3), "total": total.delay([1, 2, 3]), "users": count_users.delay(),
    "tz": time_zone.delay(), "celery_queue": on_celery_queue.delay(21),
}
print(json.dumps({name: r.get(timeout=60) for name, r in results.items()}))
"""


class Project:
    """The example project with one database and one broker setting (env, as deployments do)."""

    def __init__(self, tmp: Path, database: str, **settings: str) -> None:
        self.tmp = tmp
        # A copy: the worker's fallback SQLite file and __pycache__ land in the test's folder.
        self.dir = tmp / "django_proj"
        if not self.dir.exists():
            shutil.copytree(PROJECT, self.dir, ignore=shutil.ignore_patterns("__pycache__"))
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("POTATOQ_BROKER_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")
        }
        self.env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", EXPROJ_DATABASE=database, **settings)

    def manage(self, *args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE * 2,
            check=False,
        )
        assert proc.returncode == 0, f"manage.py {args[0]} exited {proc.returncode}:\n{proc.stderr}"
        return proc.stdout

    @contextlib.contextmanager
    def worker(self, *args: str) -> Iterator[Path]:
        """``python -m potatoq.cli ARGS`` from the project directory; yields its log file."""
        log = self.tmp / f"worker-{uuid.uuid4().hex[:6]}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "potatoq.cli", *args],
                cwd=self.dir,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                yield log
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(40)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
        print(log.read_text(errors="replace")[-4000:])  # shown when the test fails


def wait_for_text(log: Path, text: str) -> str:
    deadline = time.monotonic() + DEADLINE
    while text not in (found := log.read_text(errors="replace")):
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never appeared in the worker log:\n{found[-3000:]}")
        time.sleep(0.05)
    return found


@contextlib.contextmanager
def project_on(broker: str, tmp: Path) -> Iterator[Project]:
    if broker == "sqlite":
        yield Project(
            tmp, f"sqlite:///{tmp / 'db.sqlite3'}", EXPROJ_BROKER=f"sqlite:///{tmp / 'broker.sqlite3'}"
        )
    elif broker == "postgres":
        with postgres_database() as url:
            yield Project(tmp, url, EXPROJ_BROKER=url)
    elif broker == "rabbitmq":
        parts = urlsplit(services.require("rabbitmq"))
        url = urlunsplit(("amqp", parts.netloc, "//", "", ""))  # kombu's spelling of vhost "/"
        prefix = f"pqex{uuid.uuid4().hex[:10]}_"
        try:
            yield Project(
                tmp,
                f"sqlite:///{tmp / 'db.sqlite3'}",
                EXPROJ_BROKER=url,
                EXPROJ_QUEUE_PREFIX=prefix,
                EXPROJ_RESULTS=f"db+sqlite:///{tmp / 'results.sqlite'}",
            )
        finally:
            from potatoq.brokers import create_broker
            from potatoq.brokers.base import BrokerConfig
            from potatoq.urls import normalize_url

            leftovers = create_broker(
                BrokerConfig(url=normalize_url(url), transport_options={"queue_prefix": prefix})
            )
            try:
                leftovers.drop_all()  # type: ignore[attr-defined]
            finally:
                leftovers.close()
    else:
        url = services.require("redis")
        prefix = f"pqex:{uuid.uuid4().hex[:10]}"
        try:
            yield Project(
                tmp,
                f"sqlite:///{tmp / 'db.sqlite3'}",
                EXPROJ_BROKER=url,
                EXPROJ_PREFIX=prefix,
                EXPROJ_RESULTS=f"db+sqlite:///{tmp / 'results.sqlite'}",  # Celery's SQLAlchemy backend
            )
        finally:
            import redis

            from tests.factories.redis import delete_prefix

            client = redis.Redis.from_url(url)
            try:
                delete_prefix(client, prefix)
            finally:
                client.close()


@pytest.mark.parametrize("broker", ["sqlite", "postgres", "redis", "rabbitmq"])
def test_kept_celery_module_runs_every_apps_tasks(broker: str, tmp_path: Path) -> None:
    """``potatoq -A proj worker -Q celery``: Django set up in the worker (the ORM works), every
    app's ``@shared_task`` discovered by ``autodiscover_tasks()``, the project's broker and
    result settings used, and Celery's queue name read as the default queue."""
    with project_on(broker, tmp_path) as project:
        project.manage("migrate", "-v0")
        with project.worker("-A", "proj", "worker", "-c", "1", "-Q", "celery", "-l", "info") as log:
            sent = json.loads(project.manage("shell", "-c", SEND).strip().splitlines()[-1])
        assert sent == {"add": 5, "total": 6, "users": 2, "tz": "UTC", "celery_queue": 42}
        assert "NotRegistered" not in log.read_text(errors="replace")


@pytest.mark.parametrize("broker", ["sqlite", "postgres"])
def test_plain_command_with_django_settings_module(broker: str, tmp_path: Path) -> None:
    """No ``-A``, DJANGO_SETTINGS_MODULE in the environment (a container's command line): the
    project's own app (made by ``proj/__init__.py`` while Django starts) runs the tasks."""
    with project_on(broker, tmp_path) as project:
        project.env["DJANGO_SETTINGS_MODULE"] = "proj.settings"
        project.manage("migrate", "-v0")
        with project.worker("worker", "-c", "1"):
            sent = json.loads(project.manage("shell", "-c", SEND).strip().splitlines()[-1])
        assert sent == {"add": 5, "total": 6, "users": 2, "tz": "UTC", "celery_queue": 42}


def test_a_project_without_a_broker_setting_is_warned(tmp_path: Path) -> None:
    """No CELERY_BROKER_URL: the worker falls back to a SQLite file in its directory, which
    isn't the project's database; it says so, naming the file and what to set."""
    project = Project(tmp_path, f"sqlite:///{tmp_path / 'db.sqlite3'}")
    with project.worker("-A", "proj", "worker", "-c", "1") as log:
        text = wait_for_text(log, "sets no broker")
    assert "sqlite:///potatoq.sqlite3" in text and str(project.dir) in text
    assert "CELERY_BROKER_URL" in text and str(tmp_path / "db.sqlite3") in text
