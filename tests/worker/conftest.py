"""Real worker subprocesses on a temp SQLite broker, and helpers that wait on events.

``run_worker(...)`` starts ``python -m potatoq.cli -A tests.worker.proj worker ...`` in its own
session (signals sent to pytest never reach it), logging to a file that is printed when a
test fails. ``client`` is the test app pointed at the same broker. Everything waits on
files, results or broker state with a deadline; nothing sleeps for correctness.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 30.0


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
    """One ``potatoq worker`` subprocess."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, command: str = "worker") -> None:
        self.log = log
        self._log_file = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "potatoq.cli", "-A", "tests.worker.proj", command, *args],
            cwd=ROOT,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def children(self) -> list[int]:
        try:
            text = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = DEADLINE) -> int:
        return self.proc.wait(timeout)

    def stop(self, timeout: float = DEADLINE) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def output(self) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._log_file.close()


class Env:
    """One test's broker file, marker directory and worker processes."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "marks"
        self.dir.mkdir()
        self.url = f"sqlite:///{tmp_path / 'broker.sqlite3'}"
        self.tmp = tmp_path
        self.vars = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "POTATOQ_BROKER_URL": self.url,
            "POTATOQ_TEST_DIR": str(self.dir),
        }
        self.workers: list[Worker] = []

    def worker(self, *args: str, env: dict[str, str] | None = None, command: str = "worker") -> Worker:
        log = self.tmp / f"worker-{len(self.workers)}.log"
        worker = Worker(list(args), {**self.vars, **(env or {})}, log, command=command)
        self.workers.append(worker)
        return worker

    def mark(self, name: str) -> None:
        (self.dir / name).write_text("null")

    def marker(self, name: str) -> Any:
        path = self.dir / name
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def wait_marker(self, name: str, timeout: float = DEADLINE) -> Any:
        return wait_for(
            lambda: (self.dir / name).exists() and [self.marker(name)], timeout, f"marker {name}"
        )[0]

    def markers(self, prefix: str) -> list[str]:
        return sorted(p.name for p in self.dir.iterdir() if p.name.startswith(prefix))


@pytest.fixture
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    environment = Env(tmp_path)
    yield environment
    failed = getattr(request.node, "rep_call", None)
    for worker in environment.workers:
        worker.kill()
        if failed is not None and failed.failed:
            print(f"---- {worker.log.name} ----\n{worker.output()[-6000:]}")


@pytest.fixture
def client(env: Env) -> Iterator[Any]:
    """The test app, talking to this test's broker."""
    from tests.worker import proj

    proj.app.conf.broker_url = env.url
    proj.app.close()
    yield proj
    proj.app.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
