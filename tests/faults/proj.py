"""The app the fault tests run in real worker subprocesses.

The broker comes from ``$POTATOQ_BROKER_URL``, extra settings from ``$POTATOQ_TEST_CONF``
(a JSON object). Tasks leave evidence in ``$POTATOQ_TEST_DIR``: ``faults.record`` appends one
line per execution to ``executions.log`` (``task_id pid parent_pid``) *before* it does its
work, with a single ``write(2)`` on an ``O_APPEND`` descriptor, so an execution is on record
even when its process is SIGKILLed right after.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from potatoq import Potatoq
from potatoq.brokers import base
from potatoq.brokers.base import Delivery
from potatoq.exceptions import OperationalError

app = Potatoq("faults")
app.conf.worker_heartbeat_interval = 0.5
_conf = json.loads(os.environ.get("POTATOQ_TEST_CONF") or "{}")
#: a task name: the reply of the first claim of a task of that name is lost (see _lose_reply)
_LOSE_CLAIM_REPLY = _conf.pop("test_lose_claim_reply", None)
for key, value in _conf.items():
    app.conf[key] = value

EXECUTIONS = "executions.log"
_log_fd: int | None = None
_log_pid = 0


def _dir() -> Path:
    return Path(os.environ["POTATOQ_TEST_DIR"])


def _execution_log() -> int:
    global _log_fd, _log_pid
    if _log_fd is None or _log_pid != os.getpid():  # one descriptor per process (forked children)
        _log_fd = os.open(_dir() / EXECUTIONS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _log_pid = os.getpid()
    return _log_fd


def mark(name: str, data: object = None) -> None:
    """Write a marker file atomically (write, then rename)."""
    tmp = _dir() / f".{name}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data))
    tmp.rename(_dir() / name)


@app.task(name="faults.record", bind=True)
def record(self, n: int, work_ms: float = 0.0) -> int:
    """Record this execution, then work for ``work_ms`` milliseconds."""
    os.write(_execution_log(), f"{self.request.id} {os.getpid()} {os.getppid()}\n".encode())
    if work_ms:
        time.sleep(work_ms / 1000)
    return n


POISON = "poison.log"


@app.task(name="faults.poison", bind=True)
def poison(self) -> None:
    """Record this execution (with its delivery count), then SIGKILL its own process: a task
    that takes down whatever runs it, every time."""
    fd = os.open(_dir() / POISON, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{self.request.id} {os.getpid()} {self.request.deliveries}\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(name="faults.add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="faults.block", bind=True)
def block(self, name: str, release: str, timeout: float = 60.0) -> int:
    """Mark ``name`` as started, wait for marker ``release``; return this process's pid."""
    mark(
        f"started-{name}-{self.request.deliveries}", {"pid": os.getpid(), "delivery": self.request.deliveries}
    )
    deadline = time.monotonic() + timeout
    while not (_dir() / release).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    mark(f"done-{name}-{os.getpid()}", os.getpid())
    return os.getpid()


SPANS = "spans.log"


@app.task(name="faults.span", bind=True)
def span(self, key: str, work_ms: float) -> str:
    """Log ``S`` (start) and ``E`` (end) lines with the wall clock around ``work_ms`` of work:
    the concurrency-limit ledger (tests/faults/test_limits_ledger.py) replays them."""
    fd = os.open(_dir() / SPANS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"S {self.request.id} {os.getpid()} {key} {time.time():.6f}\n".encode())
        time.sleep(work_ms / 1000)
        os.write(fd, f"E {self.request.id} {os.getpid()} {key} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)
    return key


RATED = "rated.log"


@app.task(name="faults.rated", bind=True)
def rated(self, key: str, work_ms: float) -> str:
    """Log one line per run: its key, id, delivery count, when the broker granted it (the
    claim) and when it started here: the rate-limit ledger (tests/faults/test_rates_ledger.py)."""
    claimed = (self.request.delivery_info or {}).get("claimed_at") or 0.0
    line = f"{key} {self.request.id} {self.request.deliveries} {claimed:.6f} {time.time():.6f}\n"
    fd = os.open(_dir() / RATED, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    time.sleep(work_ms / 1000)
    return key


def _lose_reply(operation: str, delivery: Delivery) -> None:
    """``potatoq.brokers.base.after_commit_fault``: the first claim of a ``_LOSE_CLAIM_REPLY`` task, in any
    process of the node, commits but its reply is lost (marker ``reply-lost-<id>``, created
    with O_EXCL so that exactly one claim loses it)."""
    if delivery.message is None or delivery.message.task != _LOSE_CLAIM_REPLY:
        return
    try:
        fd = os.open(_dir() / f"reply-lost-{delivery.id}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    os.write(fd, json.dumps({"pid": os.getpid(), "operation": operation}).encode())
    os.close(fd)
    raise OperationalError(
        f"fault injection: the reply of the committed {operation} of {delivery.id} is lost"
    )


if _LOSE_CLAIM_REPLY:
    base.after_commit_fault = _lose_reply
