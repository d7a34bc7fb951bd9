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
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from potatoq.brokers import broker_class
from potatoq.brokers.base import BrokerConfig
from tests import services
from tests.conftest import FACTORIES, FactoryContext

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
        if not self._log_file.closed:
            self._log_file.flush()
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._log_file.close()


class Env:
    """One test's broker, marker directory and worker processes."""

    def __init__(self, tmp_path: Path, config: BrokerConfig, name: str = "sqlite") -> None:
        self.name = name
        self.dir = tmp_path / "marks"
        self.dir.mkdir()
        self.url = config.url
        self.conf: dict[str, Any] = {}
        if config.transport_options:
            self.conf["broker_transport_options"] = dict(config.transport_options)
        capabilities = broker_class(config.url).capabilities
        if config.result_backend is not None:  # a separate result store (RabbitMQ)
            self.conf["result_backend"] = config.result_backend.config.url
        elif capabilities.stores_results and not capabilities.results_by_default:
            self.conf["result_backend"] = "broker"  # opt-in on Redis: the tests read results
        self.tmp = tmp_path
        self.vars = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "POTATOQ_BROKER_URL": self.url,
            "POTATOQ_TEST_DIR": str(self.dir),
        }
        self.workers: list[Worker] = []

    def worker(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        conf: dict[str, Any] | None = None,
        command: str = "worker",
    ) -> Worker:
        """Start a worker; ``conf`` becomes app settings in it (over this test's broker options)."""
        log = self.tmp / f"worker-{len(self.workers)}.log"
        settings = {**self.conf, **(conf or {})}
        variables = {**self.vars, "POTATOQ_TEST_CONF": json.dumps(settings), **(env or {})}
        worker = Worker(list(args), variables, log, command=command)
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

    def close(self, failed: bool) -> None:
        for worker in self.workers:
            worker.kill()
            if failed:
                print(f"---- {worker.log.name} ----\n{worker.output()[-6000:]}")


def _failed(request: pytest.FixtureRequest) -> bool:
    report = getattr(request.node, "rep_call", None)
    return bool(report is not None and report.failed)


@pytest.fixture
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    """SQLite: the worker behaviour that doesn't depend on the broker."""
    environment = Env(tmp_path, BrokerConfig(url=f"sqlite:///{tmp_path / 'broker.sqlite3'}"))
    yield environment
    environment.close(_failed(request))


@pytest.fixture(params=list(FACTORIES))
def broker_env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    """Every broker in tests/factories that processes can share, isolated as in the contract suite."""
    module = FACTORIES[request.param]
    service = getattr(module, "SERVICE", None)
    if service:
        services.require(service)
    ctx = FactoryContext(tmp_path=tmp_path, unique=f"w{uuid.uuid4().hex[:10]}", overrides={})
    config = module.make_config(ctx)
    environment: Env | None = None
    try:
        if not broker_class(config.url).capabilities.multiprocess:
            pytest.skip(f"{request.param}: a worker subprocess can't share this broker")
        environment = Env(tmp_path, config, request.param)
        yield environment
    finally:
        if environment is not None:
            environment.close(_failed(request))
        for fn in reversed(ctx.finalizers):
            fn()


def _client(env: Env) -> Iterator[Any]:
    from tests.worker import proj

    saved = dict(proj.app.conf)
    proj.app.conf.broker_url = env.url
    proj.app.conf.broker_transport_options = env.conf.get("broker_transport_options", {})
    proj.app.conf.result_backend = env.conf.get("result_backend")
    proj.app.close()
    yield proj
    proj.app.close()
    proj.app.conf.update(saved)  # undo what the test changed


@pytest.fixture
def client(env: Env) -> Iterator[Any]:
    """The test app, talking to this test's broker."""
    yield from _client(env)


@pytest.fixture
def broker_client(broker_env: Env) -> Iterator[Any]:
    yield from _client(broker_env)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
