"""Tables, durations and colors: terminals get colors unless NO_COLOR, pipes never do."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from potatoq.cli_ops.output import Style, color_enabled, duration, first_line, table

from .conftest import APP, ROOT, as_json

ESC = "\x1b["


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.04, "0.0s"), (4.25, "4.2s"), (42.9, "42s"), (302, "5m 02s"), (7380, "2h 03m"), (273600, "3d 04h")],
)
def test_durations_read_at_a_glance(seconds, text):
    assert duration(seconds) == text


def test_tables_align_on_the_plain_text_even_when_colored():
    style = Style(enabled=True)
    rows = [["a", ("online", "green"), "7"], ["longer", ("lost", "red"), "12"]]
    text = table(["NAME", "STATE", "N"], rows, style, right=(2,))
    plain = Style(enabled=False)
    uncolored = table(["NAME", "STATE", "N"], rows, plain, right=(2,))
    assert uncolored.splitlines() == ["NAME    STATE    N", "a       online   7", "longer  lost    12"]
    assert text.replace("\x1b[32m", "").replace("\x1b[31m", "").replace("\x1b[1m", "").replace(
        "\x1b[0m", ""
    ) == (uncolored)


def test_color_needs_a_terminal_and_no_NO_COLOR():
    assert color_enabled(FakeTerminal(), {}) is True
    assert color_enabled(FakeTerminal(), {"NO_COLOR": "1"}) is False
    assert color_enabled(FakeTerminal(), {"TERM": "dumb"}) is False
    assert color_enabled(io.StringIO(), {}) is False
    assert color_enabled(FakeTerminal(), {"NO_COLOR": ""}) is True  # set but empty: no-color.org


def test_first_line_cuts_long_reasons():
    assert first_line("ValueError: x\nmore") == "ValueError: x"
    assert first_line("x" * 100, 10) == "x" * 9 + "…"
    assert first_line(None) == ""


def run_on_a_terminal(env, *args: str, extra: dict[str, str] | None = None) -> str:
    """Run the CLI with its stdout on a pseudo-terminal; return what it printed."""
    main, child = pty.openpty()
    variables = {**env.vars, "POTATOQ_TEST_CONF": json.dumps(env.conf), **(extra or {})}
    variables.pop("NO_COLOR", None)
    variables.update(extra or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "potatoq.cli", "-A", APP, *args],
        cwd=ROOT,
        env=variables,
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=subprocess.PIPE,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(30) in (0, 3)
    return b"".join(chunks).decode()


def test_colors_on_a_terminal_only_and_never_with_NO_COLOR(env, client, cli):
    client.add.delay(1, 2)
    colored = run_on_a_terminal(env, "status")
    assert f"{ESC}1m" in colored and f"{ESC}31m0 workers online" in colored
    assert ESC not in run_on_a_terminal(env, "status", extra={"NO_COLOR": "1"})
    assert ESC not in cli("status").stdout  # a pipe
    assert ESC not in cli("queues", "--json").stdout


def test_the_broker_url_is_shown_with_its_password_masked(cli):
    done = cli("-b", "memory://user:hunter2@somewhere", "status", "--json")
    assert as_json(done)["broker"] == "memory://user:***@somewhere"
    table = cli("-b", "memory://user:hunter2@somewhere", "status")
    assert "memory://user:***@somewhere" in table.stdout
    assert "hunter2" not in done.stdout + done.stderr + table.stdout + table.stderr


def test_shell_is_interactive_on_a_terminal(env):
    main, child = pty.openpty()
    variables = {**env.vars, "POTATOQ_TEST_CONF": json.dumps(env.conf), "TERM": "dumb"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "potatoq.cli", "-A", APP, "shell"],
        cwd=ROOT,
        env=variables,
        stdin=child,
        stdout=child,
        stderr=child,
    )
    os.close(child)
    os.write(main, b"print('got', add.name, app.main)\n")
    os.write(main, b"raise SystemExit(0)\n")
    chunks = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(30) == 0
    text = b"".join(chunks).decode()
    assert "potatoq shell: app = <Potatoq proj" in text
    assert "got proj.add proj" in text
