"""A Celery one-module app (``python myapp.py worker``) and the environment's broker URL.

``myapp.py`` names RabbitMQ in its code and ``rpc`` as its backend, as Celery's example
does; ``$CELERY_BROKER_URL`` / ``$POTATOQ_BROKER_URL`` point it at a SQLite file instead,
and win over the code as Celery's do. The worker runs as a real subprocess; this process
imports the same module with the same environment and sends to it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


@contextlib.contextmanager
def myapp_worker(env: dict[str, str], *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``python myapp.py ARGS`` (the example's own ``__main__``) until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "myapp.py"), *args],
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def myapp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    """The example module imported here, with its broker taken from the environment."""
    env = {"CELERY_BROKER_URL": f"sqlite:///{tmp_path / 'broker.sqlite3'}"}
    monkeypatch.delenv("POTATOQ_BROKER_URL", raising=False)
    monkeypatch.delenv("POTATOQ_RESULT_BACKEND", raising=False)
    monkeypatch.delenv("CELERY_RESULT_BACKEND", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(HERE))
    module = importlib.import_module("myapp")
    module.app.close()
    try:
        yield module, env
    finally:
        module.app.close()


@pytest.mark.parametrize("entry", ["start", "worker_main"])
def test_python_myapp_py_worker(myapp: tuple[Any, dict[str, str]], entry: str) -> None:
    module, env = myapp
    assert module.app.conf.broker_url == "amqp://guest@localhost//"  # the code says RabbitMQ …
    assert module.app.conf.broker_url_or_default() == env["CELERY_BROKER_URL"]  # … the env wins
    if entry == "worker_main":
        started = myapp_worker({**env, "MYAPP_WORKER_MAIN": "1"})
    else:
        started = myapp_worker(env, "worker", "-c", "1", "-l", "info")
    with started:
        assert module.add.delay(2, 3).get(timeout=60) == 5
        task_id = module.new_id()
        assert module.whoami.apply_async(task_id=task_id).get(timeout=60) == {
            "id": task_id,
            "name": "myapp.whoami",
        }


def test_potatoq_broker_url_wins_over_celery_broker_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from potatoq import Potatoq

    monkeypatch.setenv("CELERY_BROKER_URL", "memory://celery-env")
    monkeypatch.setenv("CELERY_RESULT_BACKEND", "disabled")
    app = Potatoq("envs", broker="memory://code", backend="broker")
    assert app.conf.broker_url_or_default() == "memory://celery-env"
    assert app.backend is None  # CELERY_RESULT_BACKEND won over backend="broker"
    monkeypatch.setenv("POTATOQ_BROKER_URL", "memory://potatoq-env")
    assert app.conf.broker_url_or_default() == "memory://potatoq-env"


def test_the_command_lines_broker_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from potatoq.cli import build_parser, load_app

    monkeypatch.setenv("POTATOQ_BROKER_URL", "memory://env")
    app = load_app(build_parser().parse_args(["-b", "memory://flag", "status"]))
    assert app.conf.broker_url_or_default() == "memory://flag"


def test_worker_main_needs_the_worker_command() -> None:
    from potatoq import Potatoq

    with pytest.raises(ValueError, match="needs 'worker' in argv"):
        Potatoq("wm", broker="memory://wm").worker_main(["status"])
