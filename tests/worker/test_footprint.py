"""The worker's pre-fork imports stay lean: what the supervisor imported when it forks its
children is in every child, so a module only an optional feature needs must not be there.

A subprocess runs the real ``potatoq -A app worker`` command line up to its first
``fork()`` (``Supervisor._spawn`` replaced by a dump of ``sys.modules``), so an eager import
added anywhere on that path (the CLI, the app, the broker, the worker) fails here. On SQLite
none of the optional modules may be there. On Redis and PostgreSQL the client library
itself imports some of them (redis-py and psycopg: asyncio, and with it ssl; redis-py also
hashlib, hmac, secrets, OpenTelemetry when installed; psycopg ctypes), at module level
where no lazy import can defer them, so there the worker may hold exactly what
``import redis`` / ``import psycopg`` loads in a fresh interpreter and nothing more (the
broker's NOTIFY channel hashing imported hashlib before the fork: 0.6 MB in each process).
``make bench-footprint`` measures what the modules cost (RSS, PSS, idle CPU).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import services

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
app.conf.broker_transport_options = {options!r}


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
    "hashlib": "unique tasks, the dashboard's security module, hashed names of long queues",
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
    # importlib.resources brings zipfile and tempfile: 1.8 MB a process. The SQL and Lua
    # files are read from the package's directory (potatoq.utils.package_files).
    "importlib.resources": "a potatoq package installed inside a zip archive",
    "zipfile": "a potatoq package installed inside a zip archive",
}


#: The client library each networked broker imports (what it loads alone is allowed).
CLIENTS = {"redis": "redis", "postgres": "psycopg"}


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def broker_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(broker name, URL, transport options) of a private corner of each broker."""
    name = request.param
    tag = uuid.uuid4().hex[:10]
    if name == "sqlite":
        yield name, f"sqlite:///{tmp_path / 'broker.sqlite3'}", {}
    elif name == "redis":
        import redis

        from tests.factories.redis import delete_prefix

        url = services.require("redis")
        yield name, url, {"global_keyprefix": f"pqtest:fp{tag}"}
        client = redis.Redis.from_url(url)
        try:
            delete_prefix(client, f"pqtest:fp{tag}")
        finally:
            client.close()
    else:
        from tests.factories.postgres import drop_schema

        url = services.require("postgres")
        yield name, url, {"schema": f"pq_fp{tag}"}
        drop_schema(url, f"pq_fp{tag}")


def _modules(args: list[str], cwd: Path) -> set[str]:
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={"PYTHONPATH": f"{cwd}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout or (cwd / "modules.json").read_text()))


def test_the_worker_forks_without_optional_modules(
    broker_url: tuple[str, str, dict[str, str]], tmp_path: Path
) -> None:
    name, url, options = broker_url
    (tmp_path / "fpapp.py").write_text(APP.format(url=url, options=options))
    loaded = _modules(["-c", PROBE, str(tmp_path / "modules.json")], tmp_path)
    assert f"potatoq.brokers.{name}.broker" in loaded  # the probe did reach the fork
    allowed: set[str] = set()
    if name in CLIENTS:  # what the client library loads by itself, in a fresh interpreter
        allowed = _modules(
            ["-c", f"import json, sys, {CLIENTS[name]}; print(json.dumps(list(sys.modules)))"], tmp_path
        )
        assert "asyncio" in allowed or "asyncio" not in loaded
    eager = {module: why for module, why in OPTIONAL.items() if module in loaded and module not in allowed}
    assert not eager, f"imported before the worker forks, though only needed by: {eager}"
