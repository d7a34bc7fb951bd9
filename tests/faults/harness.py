"""Real worker subprocesses for the fault tests, the test's own app, and the figures they report.

A :class:`FaultEnv` is one test's broker (an isolated config from ``tests/factories`` or a
private server), its evidence directory and its workers. Each worker is
``python -m potatoq.cli -A tests.faults.proj worker ...`` in a session of its own, so a test can
SIGKILL (or SIGSTOP) the whole process group, supervisor included. Nothing here sleeps for
correctness: waits poll a condition with a deadline.

Sizes: the default (``make test``) run is small enough for CI; ``POTATOQ_FAULTS_FULL=1`` (set by
``make reliability``) runs the sizes the figures page reports. Each scenario calls
:func:`report` with its figures: printed, and appended as a JSON line to
``$POTATOQ_FAULTS_FIGURES`` when that is set (``tests/faults/report.py`` renders them).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from potatoq.brokers import broker_class
from potatoq.brokers.base import BrokerConfig
from potatoq.states import READY_STATES

ROOT = Path(__file__).resolve().parents[2]
FULL = os.environ.get("POTATOQ_FAULTS_FULL", "") == "1"
DEADLINE = 60.0


def sized(quick: int, full: int) -> int:
    """``full`` under ``POTATOQ_FAULTS_FULL=1``, else ``quick``."""
    return full if FULL else quick


def drained(broker: Any, ids: Sequence[str], done: set[str]) -> bool:
    """Whether every task is done: nothing waiting, scheduled or running, or, on a broker
    whose stats can't see scheduled tasks (RabbitMQ parks tasks waiting on a limit in its
    delay cascade), a ready result for each of ``ids`` (``done`` remembers those seen). A
    broker whose settle writes the result after removing the task (``atomic_settle`` off:
    the Redis Cluster relays it from the queue's outbox) needs both."""
    caps = broker.capabilities
    if caps.full_stats:
        if sum(s.waiting + s.delayed + s.running for s in broker.queue_stats()) != 0:
            return False
        if caps.atomic_settle:
            return True
    for task_id in ids:
        if task_id not in done:
            record = broker.get_result(task_id)
            if record is None or record.state not in READY_STATES:
                return False
            done.add(task_id)
    return True


def wait_for(predicate: Callable[[], Any], timeout: float = DEADLINE, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def free_port() -> int:
    """A loopback TCP port nothing holds right now, below the kernel's ephemeral range.

    Servers of these tests are killed and started again on the same port. A port from the
    ephemeral range (what binding port 0 gives) can meanwhile become the local end of some
    client's connection, and the restart then fails with EADDRINUSE (a RabbitMQ node of the
    cluster test did, once)."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    candidates = list(range(max(1024, low - 12000), low))
    random.shuffle(candidates)
    for port in candidates[:500]:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port below {low}")


def report(scenario: str, broker: str, **figures: Any) -> None:
    """Print one scenario's figures and keep them for the figures page."""
    line = {"scenario": scenario, "broker": broker, "full": FULL, **figures}
    print(f"\nFIGURES {json.dumps(line)}")
    target = os.environ.get("POTATOQ_FAULTS_FIGURES")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


class Worker:
    """One ``potatoq worker`` subprocess, in its own session (process group)."""

    def __init__(self, args: list[str], env: Mapping[str, str], log: Path) -> None:
        self.log = log
        self._log_file = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "potatoq.cli", "-A", "tests.faults.proj", "worker", *args],
            cwd=ROOT,
            env=dict(env),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def children(self) -> list[int]:
        try:
            text = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the supervisor and its children at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL the whole worker (supervisor and children) and reap it."""
        if self.proc.poll() is None:
            self.signal_group(signal.SIGCONT)  # a stopped group dies either way; be explicit
            self.signal_group(signal.SIGKILL)
            self.proc.wait(10)
        else:
            self.signal_group(signal.SIGKILL)  # orphaned children of an exited supervisor

    def stop(self, timeout: float = DEADLINE) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def output(self) -> str:
        if not self._log_file.closed:
            self._log_file.flush()
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        self.kill()
        self._log_file.close()


class FaultEnv:
    """One test's broker config, evidence directory and worker processes."""

    def __init__(self, tmp_path: Path, config: BrokerConfig, name: str, **settings: Any) -> None:
        self.name = name
        self.tmp = tmp_path
        self.dir = tmp_path / "evidence"
        self.dir.mkdir(exist_ok=True)
        self.url = config.url
        self.conf: dict[str, Any] = dict(settings)
        if config.transport_options:
            self.conf["broker_transport_options"] = dict(config.transport_options)
        capabilities = broker_class(config.url).capabilities
        if config.result_backend is not None:  # a separate result store (RabbitMQ)
            self.conf["result_backend"] = config.result_backend.config.url
            if config.result_backend.config.transport_options:  # its key prefix or schema
                self.conf["result_backend_transport_options"] = dict(
                    config.result_backend.config.transport_options
                )
        elif capabilities.stores_results and not capabilities.results_by_default:
            self.conf.setdefault("result_backend", "broker")  # results are opt-in on Redis
        self.workers: list[Worker] = []

    def environ(self, conf: Mapping[str, Any] | None = None) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "POTATOQ_BROKER_URL": self.url,
            "POTATOQ_TEST_DIR": str(self.dir),
            "POTATOQ_TEST_CONF": json.dumps({**self.conf, **(conf or {})}),
        }

    def worker(self, *args: str, conf: Mapping[str, Any] | None = None) -> Worker:
        log = self.tmp / f"worker-{len(self.workers)}.log"
        worker = Worker(list(args), self.environ(conf), log)
        self.workers.append(worker)
        return worker

    def mark(self, name: str) -> None:
        (self.dir / name).write_text("null")

    def marker(self, name: str) -> Any:
        try:
            return json.loads((self.dir / name).read_text())
        except (OSError, ValueError):
            return None

    def wait_marker(self, name: str, timeout: float = DEADLINE) -> Any:
        # Until it parses: a marker is created, then written, so it can be seen empty.
        return wait_for(
            lambda: (value := self.marker(name)) is not None and [value], timeout, f"marker {name}"
        )[0]

    def executions(self) -> list[tuple[str, int, int]]:
        """``(task_id, pid, parent_pid)`` for every recorded run of ``faults.record``."""
        path = self.dir / "executions.log"
        if not path.exists():
            return []
        rows = []
        for line in path.read_text().splitlines():
            task_id, pid, ppid = line.split()
            rows.append((task_id, int(pid), int(ppid)))
        return rows

    def logs(self) -> str:
        return "\n".join(f"---- {w.log.name} ----\n{w.output()}" for w in self.workers)

    def close(self, failed: bool = False) -> None:
        for worker in self.workers:
            worker.close()
            if failed:
                print(f"---- {worker.log.name} ----\n{worker.output()[-8000:]}")


@contextlib.contextmanager
def client(env: FaultEnv, **settings: Any) -> Iterator[Any]:
    """The test's own app (``tests.faults.proj``) pointed at ``env``'s broker."""
    from tests.faults import proj

    saved = dict(proj.app.conf)
    proj.app.close()
    proj.app.conf.broker_url = env.url
    for key, value in {**env.conf, **settings}.items():
        proj.app.conf[key] = value
    try:
        yield proj
    finally:
        proj.app.close()
        proj.app.conf.update(saved)
        for key in set(proj.app.conf) - set(saved):
            with contextlib.suppress(KeyError, AttributeError):
                del proj.app.conf[key]
