"""The app the worker tests run in real worker subprocesses.

The broker comes from ``$POTATOQ_BROKER_URL`` (a temp SQLite file per test). Tasks leave
evidence in ``$POTATOQ_TEST_DIR`` (marker files) so tests can wait on events, not sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path

from potatoq import Potatoq
from potatoq.exceptions import SoftTimeLimitExceeded

app = Potatoq("proj")
if os.environ.get("POTATOQ_TEST_BEAT"):
    app.conf.beat_schedule = {
        "tick": {"task": "proj.tick", "schedule": float(os.environ["POTATOQ_TEST_BEAT"])},
    }
app.conf.worker_heartbeat_interval = 1.0
# Per-test settings: a JSON object in $POTATOQ_TEST_CONF, e.g. {"worker_shutdown_timeout": 2}
for key, value in json.loads(os.environ.get("POTATOQ_TEST_CONF") or "{}").items():
    app.conf[key] = value


def _dir() -> Path:
    return Path(os.environ["POTATOQ_TEST_DIR"])


def mark(name: str, data: object = None) -> None:
    """Write a marker file atomically (write, then rename)."""
    tmp = _dir() / f".{name}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data))
    tmp.rename(_dir() / name)


@app.task(name="proj.add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="proj.pid")
def pid() -> int:
    return os.getpid()


@app.task(name="proj.gc_frozen")
def gc_frozen() -> int:
    """How many objects the garbage collector of this process leaves alone (gc.freeze)."""
    import gc

    return gc.get_freeze_count()


@app.task(name="proj.block", bind=True)
def block(self, name: str, release: str | None = None, timeout: float = 60.0) -> int:
    """Mark ``name`` as started, then wait for marker ``release`` (or ``timeout``)."""
    mark(f"started-{name}", {"pid": os.getpid(), "delivery": self.request.deliveries})
    deadline = time.monotonic() + timeout
    while release is not None and not (_dir() / release).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    if release is None:
        time.sleep(timeout)
    mark(f"done-{name}", os.getpid())
    return os.getpid()


@app.task(name="proj.crash_self", bind=True)
def crash_self(self, how: str = "exit") -> None:
    """Kill the process running it, every time."""
    mark(f"crash-{self.request.id}-{self.request.deliveries}", os.getpid())
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(3)


@app.task(name="proj.soft", bind=True)
def soft(self, seconds: float) -> str:
    try:
        time.sleep(seconds)
    except SoftTimeLimitExceeded:
        mark(f"soft-{self.request.id}")
        return "cleaned up"
    return "finished"


@app.task(name="proj.spin", bind=True)
def spin(self, seconds: float) -> str:
    """Busy Python loop (soft limits in threads arrive at the next bytecode)."""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            pass
    except SoftTimeLimitExceeded:
        mark(f"soft-{self.request.id}")
        return "cleaned up"
    return "finished"


@app.task(name="proj.hang", bind=True)
def hang(self, seconds: float) -> str:
    """Ignores the soft limit, so only the hard one can stop it."""
    mark(f"started-{self.request.id}", os.getpid())
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(SoftTimeLimitExceeded):
            time.sleep(0.05)
    return "finished"


@app.task(name="proj.async_add")
async def async_add(x: int, y: int) -> int:
    await asyncio.sleep(0.01)
    return x + y


@app.task(name="proj.which")
def which(label: str) -> list:
    return [label, os.getpid()]


@app.task(name="proj.tick", bind=True)
def tick(self) -> None:
    """One marker per run, named by its fire time (the message expires at the next one)."""
    mark(f"tick-{self.request.expires:.3f}-{self.request.id}", os.getpid())


@app.task(name="proj.async_soft", bind=True)
async def async_soft(self, seconds: float) -> str:
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:  # how an async task sees its soft limit
        mark(f"soft-{self.request.id}")
        raise
    return "finished"


@app.task(name="proj.rated", bind=True, rate_limit="5/s")
def rated(self) -> None:
    """Record when this run started (tests count the starts within a window)."""
    mark(f"rated-{self.request.id}", {"at": time.time(), "pid": os.getpid()})


@app.task(name="proj.stubborn", bind=True)
def stubborn(self, name: str) -> None:
    """Ignore SIGTERM, mark ``started-name``, then wait (only SIGKILL stops it)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    mark(f"started-{name}", {"pid": os.getpid(), "delivery": self.request.deliveries})
    time.sleep(120)


@app.task(name="proj.rated_briefly", rate_limit="2/s", soft_time_limit=1.0, time_limit=1.5)
def rated_briefly(n: int) -> int:
    """Rate-limited with time limits shorter than the wait for a token on a busy node."""
    return n
