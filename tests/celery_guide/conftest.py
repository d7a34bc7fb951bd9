"""Real workers for the examples of Celery's user guide, on SQLite and on Redis.

Each test module gets one worker per broker (a module-scoped fixture), started as
``python -m potatoq.cli -A <app> worker -c 2 ...`` exactly as the guide starts Celery's,
with ``$POTATOQ_BROKER_URL`` pointing at a temp SQLite file or at Redis db 15 under a
unique ``global_keyprefix``. The test process imports the same app and points it at the
same broker. Workers run with ``PYTHONUNBUFFERED=1`` so the guide's ``print(...)`` calls
reach the worker log as they happen; tests wait on log lines and results with deadlines,
never on sleeps.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import services

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DEADLINE = 20.0
BROKERS = ["sqlite", "redis"]


def wait_for(predicate: Callable[[], Any], timeout: float = DEADLINE, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class Worker:
    def __init__(self, app: str, args: list[str], env: dict[str, str], log: Path, cwd: Path) -> None:
        self.log = log
        self._file = log.open("ab")
        self.started_at = time.time()  # the wall clock just before it starts
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "potatoq.cli", "-A", app, "worker", *args],
            cwd=cwd,
            env=env,
            stdout=self._file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def lines_after(self, marker: str) -> list[str]:
        """The log lines from the one containing ``marker`` on."""
        lines = self.output().splitlines()
        for i, line in enumerate(lines):
            if marker in line:
                return lines[i:]
        return []

    def wait_output(self, text: str, timeout: float = DEADLINE) -> str:
        return wait_for(
            lambda: text in self.output() and self.output(), timeout, f"{text!r} in the worker log"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._file.close()


class World:
    """One broker (SQLite file or Redis key prefix) and the workers started on it."""

    def __init__(self, name: str, tmp: Path) -> None:
        self.name = name
        self.tmp = tmp
        self.workers: list[Worker] = []
        self.prefix = f"pqguide:{uuid.uuid4().hex[:10]}"
        if name == "sqlite":
            self.url = f"sqlite:///{tmp / 'broker.sqlite3'}"
            self.transport: dict[str, Any] = {}
        else:
            self.url = services.require("redis")
            self.transport = {"global_keyprefix": self.prefix}

    @property
    def settings(self) -> dict[str, Any]:
        """What the app needs beyond the broker URL (Redis: the key prefix)."""
        if not self.transport:
            return {}
        return {
            "broker_transport_options": self.transport,
            "result_backend_transport_options": self.transport,
        }

    def worker(
        self,
        app: str,
        *args: str,
        path: Path | None = None,
        env: dict[str, str] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> Worker:
        log = self.tmp / f"worker-{len(self.workers)}.log"
        worker = Worker(app, list(args), self.environ(path, env, settings), log, cwd=path or ROOT)
        self.workers.append(worker)
        return worker

    def environ(
        self,
        path: Path | None = None,
        env: dict[str, str] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> dict[str, str]:
        """The environment a ``potatoq`` command on this broker runs in."""
        pythonpath = [str(ROOT)] + ([str(path)] if path else [])
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(pythonpath),
            "PYTHONUNBUFFERED": "1",
            "POTATOQ_BROKER_URL": self.url,
            "POTATOQ_GUIDE_SETTINGS": json.dumps({**self.settings, **(settings or {})}),
            "POTATOQ_GUIDE_DIR": str(self.tmp),
            **(env or {}),
        }

    def command(self, app: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``potatoq -A app ARGS`` (a command other than ``worker``) to its end."""
        return subprocess.run(
            [sys.executable, "-m", "potatoq.cli", "-A", app, *args],
            cwd=ROOT,
            env=self.environ(),
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=False,
        )

    def point(self, app: Any) -> Iterator[Any]:
        """Point ``app`` (imported in this process) at this broker for the duration."""
        saved = {
            k: app.conf[k]
            for k in ("broker_url", "broker_transport_options", "result_backend_transport_options")
        }
        app.close()
        app.conf.broker_url = self.url
        app.conf.broker_transport_options = dict(self.transport)
        app.conf.result_backend_transport_options = dict(self.transport)
        os.environ["POTATOQ_GUIDE_DIR"] = str(self.tmp)
        try:
            yield app
        finally:
            app.close()
            for key, value in saved.items():
                app.conf[key] = value

    def close(self, failed: bool) -> None:
        for worker in self.workers:
            worker.stop()
            if failed:
                print(f"---- {self.name} {worker.log.name} ----\n{worker.output()[-8000:]}")
        if self.transport:
            import redis

            from tests.factories.redis import delete_prefix

            client = redis.Redis.from_url(self.url)
            try:
                delete_prefix(client, self.prefix)
            finally:
                client.close()


@pytest.fixture(scope="module", params=BROKERS)
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The broker the examples of one test module run on, once per broker."""
    environment = World(request.param, tmp_path_factory.mktemp(f"guide-{request.param}"))
    yield environment
    environment.close(failed=request.session.testsfailed > 0)


def import_fresh(name: str) -> Any:
    return importlib.import_module(name)
