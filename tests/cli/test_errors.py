"""What a user sees when something is wrong: one line on stderr, a status that means it.

A wrong app path, an unknown URL scheme or a malformed URL is exit 2; an unreachable broker
is exit 1 and names the (masked) URL. Passwords never reach the output.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from .conftest import run_cli

COMMANDS = [
    ["status"],
    ["queues"],
    ["dead", "list"],
    ["inspect", "ping"],
    ["call", "proj.add", "-a", "[1, 2]"],
    ["result", "some-id"],
    ["revoke", "some-id"],
    ["purge", "-f", "--all-queues"],
    ["dead", "retry", "--all"],
]


def one_line_error(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("potatoq: error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def test_a_wrong_app_path_is_exit_2_naming_it():
    done = run_cli(None, "status", app="projj.tasks")
    assert done.returncode == 2
    assert one_line_error(done) == (
        "potatoq: error: can't import 'projj.tasks': no module named 'projj' (is it on sys.path?)"
    )


def test_an_unknown_url_scheme_is_exit_2_with_the_password_masked():
    done = run_cli(None, "-b", "rabbit://guest:hunter2@host/", "queues", app=None)
    assert done.returncode == 2
    line = one_line_error(done)
    assert "unknown broker URL scheme in 'rabbit://guest:***@host/'" in line
    assert "hunter2" not in done.stderr + done.stdout


def test_a_malformed_sqlite_url_is_exit_2():
    done = run_cli(None, "-b", "sqlite://host/db.sqlite3", "queues", app=None)
    assert done.returncode == 2
    assert "has a host part" in one_line_error(done)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_an_unreachable_sqlite_database_is_exit_1_naming_it(tmp_path: Path, command: list[str]):
    url = f"sqlite:///{tmp_path}/missing-dir/broker.sqlite3"
    done = run_cli(None, "-b", url, *command)
    assert done.returncode == 1, done.stderr
    line = one_line_error(done)
    assert line.startswith(f"potatoq: error: can't reach the broker at sqlite:///{tmp_path}/missing-dir/")


def short_timeout_app(tmp_path: Path) -> str:
    (tmp_path / "impatient.py").write_text(
        "from potatoq import Potatoq\n"
        "app = Potatoq('impatient', broker_connection_timeout=0.3)\n"
        "@app.task(name='impatient.ping')\n"
        "def ping():\n"
        "    return 'pong'\n"
    )
    return "impatient"


def needs_broker_module(name: str) -> None:
    if importlib.util.find_spec(f"potatoq.brokers.{name}") is None:
        pytest.skip(f"potatoq.brokers.{name} isn't in this tree yet")


@pytest.mark.parametrize(
    ("module", "url", "masked"),
    [
        ("redis", "redis://user:hunter2@127.0.0.1:1/0", "redis://user:***@127.0.0.1:1/0"),
        ("postgres", "postgresql://user:hunter2@127.0.0.1:1/db", "postgresql://user:***@127.0.0.1:1/db"),
        ("rabbitmq", "amqp://user:hunter2@127.0.0.1:1/", "amqp://user:***@127.0.0.1:1/"),
    ],
)
@pytest.mark.parametrize("command", [["status"], ["call", "impatient.ping"], ["dead", "list"]], ids=" ".join)
def test_an_unreachable_server_is_exit_1_naming_the_masked_url(tmp_path, module, url, masked, command):
    needs_broker_module(module)
    app = short_timeout_app(tmp_path)
    done = run_cli(None, "-b", url, "--result-backend", "disabled", *command, app=app, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert one_line_error(done).startswith(f"potatoq: error: can't reach the broker at {masked}: ")
    assert "hunter2" not in done.stderr + done.stdout


def test_a_redis_url_with_a_bad_port_is_exit_2():
    needs_broker_module("redis")
    done = run_cli(None, "-b", "redis://127.0.0.1:notaport/0", "status", app=None)
    assert done.returncode == 2
    assert "notaport" in one_line_error(done)


@pytest.mark.parametrize(
    "args",
    [["dead"], ["inspect"], ["inspect", "nope"], ["dead", "list", "--limit", "x"], ["result"], ["revoke"]],
    ids=" ".join,
)
def test_usage_errors_are_exit_2(args):
    done = run_cli(None, "-b", "memory://usage", *args, app=None)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("potatoq")
