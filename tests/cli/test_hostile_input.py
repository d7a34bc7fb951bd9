"""Bad and hostile input at the command line: one line naming what is wrong, no traceback,
no secret, no terminal escape from broker data, and nothing sent."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from potatoq import Potatoq
from potatoq.message import Message
from potatoq.testing import drain
from potatoq.utils import mask_url, scrub
from potatoq.utils.printable import EscapingFormatter, printable
from tests import services

from .conftest import run_cli

HOSTILE_NAME = "evil\x1b]0;owned\x07\x1b[2J\n[2026-12-05 00:00:00,000: ERROR/MainProcess] forged"


def one_line_error(done) -> str:  # type: ignore[no-untyped-def]
    """The error line: alone, or after argparse's usage lines; never a traceback."""
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    if lines and lines[0].startswith("usage:"):
        lines = [line for line in lines if line.startswith("potatoq ")]
    assert len(lines) == 1, done.stderr
    assert "error: " in lines[0], done.stderr
    return str(lines[0])


def _sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'broker.sqlite3'}"


def _waiting(url: str) -> int:
    app = Potatoq("check", broker=url, set_as_current=False)
    try:
        return sum(s.waiting + s.delayed for s in app.broker.queue_stats())
    finally:
        app.close()


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--priority", "99999999999999999999"], "--priority: must be between -2147483648 and 2147483647"),
        (["--countdown", "1e308"], "countdown/eta is out of range"),
        (["--countdown", "inf"], "expected a finite number of seconds"),
        (["-a", "[" * 5000 + "]" * 5000], "--args is nested too deeply"),
        (["-a", "[NaN]"], "NaN and Infinity aren't JSON numbers"),
        (["-k", '{"x": Infinity}'], "keyword argument 'x' (float) of task 'proj.add'"),
    ],
    ids=["priority", "countdown", "countdown-inf", "nested", "nan", "infinity"],
)
def test_call_refuses_out_of_range_options_in_one_line(tmp_path: Path, options: list[str], says: str) -> None:
    url = _sqlite(tmp_path)
    done = run_cli(None, "-b", url, "call", "proj.add", *options, app=None)
    assert done.returncode == 2, done.stderr
    assert says in one_line_error(done)
    assert _waiting(url) == 0


@pytest.mark.parametrize("name", [HOSTILE_NAME, "tab\tname", "bidi\u202ename", "del\x7f"])
def test_task_names_with_control_characters_are_refused_at_send(tmp_path: Path, name: str) -> None:
    done = run_cli(None, "-b", _sqlite(tmp_path), "call", name, app=None)
    assert done.returncode == 2
    line = one_line_error(done)
    assert "invalid task name" in line and "must be printable" in line
    assert "\x1b" not in done.stderr  # the refusal itself doesn't echo the escape sequence


def test_api_refuses_non_printable_task_names_nan_and_out_of_range_options(tmp_path: Path) -> None:
    from potatoq.exceptions import InvalidName, InvalidOption, SerializationError

    app = Potatoq("api", broker=_sqlite(tmp_path), set_as_current=False)
    try:
        with pytest.raises(InvalidName, match="U\\+000A"):
            app.send_task("line\nbreak")
        with pytest.raises(SerializationError, match="argument 0 .*NaN and Infinity"):
            app.send_task("proj.add", args=[float("nan")])
        with pytest.raises(SerializationError, match="keyword argument 'deep'.*Infinity"):
            app.send_task("proj.add", kwargs={"deep": {"x": [float("-inf")]}})
        with pytest.raises(InvalidOption, match="priority"):
            app.send_task("proj.add", priority=2**40)
        with pytest.raises(InvalidOption, match="year 10000"):
            app.send_task("proj.add", countdown=1e308)
        with pytest.raises(SerializationError, match="nested too deeply"):
            nested: list[object] = []
            for _ in range(100_000):
                nested = [nested]
            app.send_task("proj.add", args=[nested])
        assert sum(s.waiting + s.delayed for s in app.broker.queue_stats()) == 0
        app.send_task("proj.add", args=[1.5], priority=2**31 - 1, countdown=3600)  # the edges are fine
    finally:
        app.close()


def test_redis_url_with_a_non_numeric_database_is_refused() -> None:
    for url in ("redis://127.0.0.1:6379/abc", "valkey://127.0.0.1:6380/0x1", "redis://127.0.0.1:6379?db=one"):
        done = run_cli(None, "-b", url, "queues", app=None)
        assert done.returncode == 2, done.stderr
        assert "must be a number such as /0" in one_line_error(done)


def test_redis_database_out_of_range_is_one_line() -> None:
    base = services.require("redis")
    url = base.rsplit("/", 1)[0] + "/99999"
    for command in (["queues"], ["call", "proj.add"], ["worker", "-c", "1"]):
        done = run_cli(None, "-b", url, *command, app=None)
        assert done.returncode == 1, done.stderr
        assert "the broker refused: ResponseError: DB index is out of range" in one_line_error(done)


SECRET = "pw-S3CRET"


@pytest.mark.parametrize(
    "url",
    [
        f"redis://user:{SECRET} space@127.0.0.1:1/0",
        f"redis://user:{SECRET}@at@127.0.0.1:1/0",
        f"redis://user:{SECRET}#hash@127.0.0.1:1/0",
        f"redis://user:a#{SECRET}@127.0.0.1:1/0",
        f"postgresql://user:{SECRET} space@127.0.0.1:1/db",
        f"postgresql://user:{SECRET}@at@127.0.0.1:1/db",
        f"amqp://user:{SECRET}@at@127.0.0.1:1/",
        f"sqlite://user:{SECRET}@at@host/db",
    ],
)
def test_no_part_of_a_malformed_password_is_ever_printed(url: str) -> None:
    done = run_cli(None, "-b", url, "queues", app=None, timeout=120)
    assert done.returncode in (1, 2)
    one_line_error(done)
    for part in (SECRET, "S3CRET", "space@", "@at", "hash", "a#"):
        assert part not in done.stderr + done.stdout, (part, done.stderr)


def test_mask_url_hides_whole_userinfo_when_malformed() -> None:
    assert mask_url("redis://u:se cret@h/0") == "redis://u:***@h/0"
    assert mask_url("redis://us er:secret@h/0") == "redis://***@h/0"
    assert mask_url("redis://a@b@h/0") == "redis://***@h/0"
    assert mask_url("postgresql://app@db/x") == "postgresql://app@db/x"  # a user name alone
    words = "failed to resolve host 'secret@xyz@127.0.0.1'; username-password pair refused"
    assert scrub(words, ["redis://u:pass:secret@xyz@127.0.0.1/0"]) == (
        "failed to resolve host '***@***@127.0.0.1'; username-password pair refused"
    )


def test_dead_list_escapes_what_the_broker_holds(tmp_path: Path) -> None:
    url = _sqlite(tmp_path)
    app = Potatoq("plant", broker=url, set_as_current=False)
    try:  # written as a buggy or hostile producer would: past the send-time checks
        app.broker.enqueue([Message(id=f"id\x1b[31m{uuid.uuid4().hex}", task=HOSTILE_NAME)])
        drain(app)
        assert len(app.broker.list_dead()) == 1
    finally:
        app.close()
    for options in ([], ["--traceback"]):
        done = run_cli(None, "-b", url, "dead", "list", *options, app=None, extra_env={"NO_COLOR": "1"})
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout
        assert "\\x1b]0;owned" in done.stdout
        assert not any(line.startswith("[2026-12-05") for line in done.stdout.splitlines())


def test_log_lines_escape_their_arguments() -> None:
    formatter = EscapingFormatter("%(levelname)s %(message)s")
    args = (HOSTILE_NAME, "x")
    record = logging.LogRecord("potatoq", logging.INFO, __file__, 1, "task %s[%s] ok", args, None)
    line = formatter.format(record)
    assert "\x1b" not in line and "\x07" not in line
    assert "\n[2026" not in line  # a continuation is indented: it can't pass for a record
    assert record.args == (HOSTILE_NAME, "x")  # other handlers get the record unchanged
    assert printable("a\tb\u202e") == "a\\tb\\u202e"
    assert printable("Traceback\n  File\x1b", multiline=True) == "Traceback\n  File\\x1b"


def test_a_stray_module_in_the_working_directory_does_not_shadow_a_library(tmp_path: Path) -> None:
    (tmp_path / "colorsys.py").write_text("raise SystemExit('the stray ./colorsys.py was imported')\n")
    (tmp_path / "proj.py").write_text(
        "import colorsys\nfrom potatoq import Potatoq\n"
        f"app = Potatoq('proj', broker={_sqlite(tmp_path)!r})\nassert colorsys.rgb_to_hsv(0, 0, 0)[2] == 0\n"
    )
    script = Path(sys.executable).parent / "potatoq"  # the console script: no cwd on sys.path
    if not script.exists():
        pytest.skip(f"no console script at {script}")
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "POTATOQ_APP")}
    for argv in (["-A", "proj", "queues"], ["-b", _sqlite(tmp_path), "queues"]):
        done = subprocess.run(
            [str(script), *argv],
            check=False,
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "stray" not in done.stderr
