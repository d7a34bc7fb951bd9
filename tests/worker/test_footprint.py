"""The worker's pre-fork imports stay lean: what the supervisor imported when it forks its
children is in every child, so a module only an optional feature needs must not be there.

A subprocess runs the real ``potatoq -A app worker`` command line on a SQLite broker up to
its first ``fork()`` (``Supervisor._spawn`` replaced by a dump of ``sys.modules``), so an
eager import added anywhere on that path (the CLI, the app, the broker, the worker) fails
here. ``make bench-footprint`` measures what the modules cost (RSS, PSS, idle CPU).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, os, sys
from potatoq.worker import supervisor

def spawn(self, index):
    with open(sys.argv[1], "w") as out:
        json.dump(sorted(sys.modules), out)
    os._exit(0)

supervisor.Supervisor._spawn = spawn
from potatoq.cli import main
main(["-A", "fpapp", "worker", "-c", "2", "-Q", "footprint-guard"])
raise SystemExit("the worker returned without forking")
"""

APP = """
from potatoq import Potatoq

app = Potatoq("footprint", broker={url!r})


@app.task
def noop():
    return None


@app.task
async def anoop():
    return None
"""

#: Modules only an optional feature (or a task that uses it) needs, and what loads them then.
OPTIONAL = {
    "asyncio": "the first coroutine task (executor), AsyncResult.aget",
    "ssl": "asyncio, or a TLS broker URL",
    "ctypes": "a soft time limit firing",
    "hashlib": "unique tasks, the dashboard's security module",
    "hmac": "the dashboard",
    "secrets": "the dashboard",
    "pydantic": "tasks declared with pydantic=True",
    "http.server": "--metrics-port / --health-port",
    "potatoq.metrics": "--metrics-port",
    "potatoq.dashboard.app": "potatoq dashboard",
    "potatoq.dashboard.security": "potatoq dashboard",
    "potatoq.eager": "task.apply() / task_always_eager",
    "potatoq.brokers.memory": "memory:// or an eager run",
    "potatoq.testing": "tests",
    "potatoq.contrib.otel": "the OpenTelemetry integration",
    "opentelemetry": "the OpenTelemetry integration",
    "starlette": "potatoq dashboard",
    "jinja2": "potatoq dashboard",
}


def test_the_worker_forks_without_optional_modules(tmp_path):
    (tmp_path / "fpapp.py").write_text(APP.format(url=f"sqlite:///{tmp_path / 'broker.sqlite3'}"))
    dump = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(dump)],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(dump.read_text()))
    assert "potatoq.brokers.sqlite.broker" in loaded  # the probe did reach the fork
    eager = {name: why for name, why in OPTIONAL.items() if name in loaded}
    assert not eager, f"imported before the worker forks, though only needed by: {eager}"
