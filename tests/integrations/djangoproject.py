"""Driving the test Django project (tests/integrations/djproj) in subprocesses, as a user would.

Each project gets its own database: a temp SQLite file, or a PostgreSQL database created
for it and dropped afterwards.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests import services

PROJECT = Path(__file__).parent / "djproj"
ROOT = Path(__file__).parents[2]


def require_cli() -> None:
    """Skip until the worker and the ``potatoq`` command are on this branch."""
    if importlib.util.find_spec("potatoq.cli") is None:
        pytest.skip("potatoq.cli (the worker's branch) isn't merged here yet")


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database (its URL), dropped afterwards."""
    import psycopg

    admin_url = services.require("postgres")
    name = f"potatoq_dj_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(admin_url)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, "/" + name, "", ""))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class DjangoProject:
    """One configuration of the test project: its database and (optionally) its broker."""

    def __init__(
        self,
        database: str,
        broker: str | None = None,
        settings: Mapping[str, Any] | None = None,
        **env: str,
    ) -> None:
        self.database = database
        self.broker = broker
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "djproj.settings",
            "DJPROJ_DATABASE": database,
            "PYTHONPATH": os.pathsep.join([str(PROJECT), str(ROOT)]),
            **env,
        }
        self.env.pop("POTATOQ_BROKER_URL", None)
        if broker:
            self.env["DJPROJ_BROKER"] = broker
        if settings:
            self.env["DJPROJ_SETTINGS"] = json.dumps(dict(settings))

    def manage(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, str(PROJECT / "manage.py"), *args],
            env=self.env,
            cwd=PROJECT,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"manage.py {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
        return proc

    def scenario(self, name: str, *ids: str, check: bool = True) -> Any:
        proc = self.manage("scenario", name, *ids, check=check)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else None

    @contextlib.contextmanager
    def worker(self, *args: str, plain: bool = False) -> Iterator[subprocess.Popen[str]]:
        """``manage.py potatoq worker`` running until the block ends (then SIGTERM);
        ``plain``: the plain ``potatoq worker`` command instead, with DJANGO_SETTINGS_MODULE."""
        require_cli()
        start = (
            [sys.executable, "-m", "potatoq.cli"]
            if plain
            else [sys.executable, str(PROJECT / "manage.py"), "potatoq"]
        )
        proc = subprocess.Popen(
            [*start, "worker", "-Q", "shop", *args],
            env=self.env,
            cwd=PROJECT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                out, _ = proc.communicate(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            self.worker_output = out
