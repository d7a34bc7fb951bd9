"""The potatoq command run for real: ``python -m potatoq.cli`` subprocesses on a temp broker.

``cli(...)`` runs one command against this test's broker (the app is ``tests.worker.proj``
unless ``app=`` says otherwise) and returns the finished process. Worker subprocesses and
the per-broker isolation come from the worker tests' fixtures (``env``, ``broker_env``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.worker.conftest import (  # noqa: F401 - fixtures and the report hook, shared
    ROOT,
    Env,
    broker_client,
    broker_env,
    client,
    env,
    pytest_runtest_makereport,
    wait_for,
)

APP = "tests.worker.proj"

Run = Callable[..., subprocess.CompletedProcess[str]]


def run_cli(
    environment: Env | None,
    *args: str,
    app: str | None = APP,
    input: str | None = None,  # noqa: A002 - subprocess's word
    extra_env: dict[str, str] | None = None,
    cwd: Path = ROOT,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``potatoq [-A app] args…`` against ``environment``'s broker; stdin is empty by default."""
    variables = dict(environment.vars if environment is not None else {**os.environ, "PYTHONPATH": str(ROOT)})
    variables.pop("NO_COLOR", None)
    if environment is not None:
        variables["POTATOQ_TEST_CONF"] = json.dumps(environment.conf)
    variables.update(extra_env or {})
    command = [sys.executable, "-m", "potatoq.cli", *(["-A", app] if app else []), *args]
    return subprocess.run(
        command,
        cwd=cwd,
        env=variables,
        input=input or "",
        capture_output=True,
        check=False,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def cli(env: Env) -> Run:  # noqa: F811 - the fixture imported above
    """Run the CLI against the SQLite broker of ``env``."""
    return lambda *args, **kw: run_cli(env, *args, **kw)


@pytest.fixture
def any_cli(broker_env: Env) -> Run:  # noqa: F811
    """Run the CLI against each broker of tests/factories that processes can share."""
    return lambda *args, **kw: run_cli(broker_env, *args, **kw)


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.stdout.strip(), f"no output; stderr: {done.stderr}"
    return json.loads(done.stdout)
