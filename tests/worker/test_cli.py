"""The potatoq command: finding the app, clear one-line errors, migrate."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from potatoq.cli import UsageError, find_app, main, split_queues

from .conftest import ROOT


def run_cli(*args: str, env_url: str | None = None) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if env_url:
        env["POTATOQ_BROKER_URL"] = env_url
    return subprocess.run(
        [sys.executable, "-m", "potatoq.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )


def test_find_app_by_module_attribute_and_package():
    from tests.worker import proj

    assert find_app("tests.worker.proj") is proj.app
    assert find_app("tests.worker.proj:app") is proj.app
    assert find_app("tests.worker.proj.app") is proj.app


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nosuchmodule", "can't import 'nosuchmodule': no module named 'nosuchmodule'"),
        ("tests.worker.proj:nope", "module 'tests.worker.proj' has no attribute 'nope'"),
        ("tests.worker.proj:add", "not a potatoq app"),
        ("tests.worker.test_cli", "no potatoq app found in 'tests.worker.test_cli'"),
    ],
)
def test_wrong_app_paths_are_clear_errors(spec, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        find_app(spec)


def test_wrong_app_path_is_one_line_on_stderr_and_exit_2():
    done = run_cli("-A", "nosuchmodule", "worker")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "potatoq: error: can't import 'nosuchmodule': no module named 'nosuchmodule' (is it on sys.path?)"
    ]


def test_bad_option_values_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["-A", "tests.worker.proj", "worker", "-c", "0"])
    assert exc.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_bad_queue_name_is_reported(tmp_path):
    done = run_cli("-A", "tests.worker.proj", "-b", f"sqlite:///{tmp_path / 'b.db'}", "worker", "-Q", "a b")
    assert done.returncode == 2
    assert "invalid queue name 'a b'" in done.stderr


def test_migrate_creates_the_broker_storage(tmp_path):
    target = tmp_path / "m.sqlite3"
    done = run_cli("-b", f"sqlite:///{target}", "migrate")
    assert done.returncode == 0, done.stderr
    assert "migrated broker" in done.stdout
    assert target.exists()


def test_split_queues():
    assert split_queues(["a,b", "c", "a", " d , "]) == ("a", "b", "c", "d")
    assert split_queues(None) == ()


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "worker" in capsys.readouterr().err


@pytest.mark.parametrize(("given", "level"), [(None, logging.WARNING), ("info", logging.INFO)])
def test_log_level_defaults_to_warning_as_in_celery(given, level):
    from potatoq import Potatoq
    from potatoq.cli import setup_logging

    target = logging.getLogger("potatoq")
    saved = (target.level, list(target.handlers), target.propagate)
    try:
        setup_logging(Potatoq("p"), given)
        assert target.level == level
    finally:
        target.setLevel(saved[0])
        target.handlers[:] = saved[1]
        target.propagate = saved[2]
