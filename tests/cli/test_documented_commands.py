"""The potatoq commands shown in docs/ are real: every one parses, and ```sh test blocks run.

Every ``potatoq …`` command line in a shell, console, text or ini block of any page must
be accepted by the CLI's parser (a synopsis such as ``potatoq [-A APP] …`` is skipped).
Blocks marked ```sh test run in bash, in order, against a fresh SQLite broker, with a
``proj.py`` that is the test app (its tasks are named ``proj.add``, ``proj.block`` …).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from potatoq.cli import build_parser

from .conftest import ROOT

DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```", re.S | re.M)
SHELL_KINDS = {"sh", "bash", "console", "text", "ini", "shell"}
SEPARATORS = {"|", "||", "&&", ";", "(", ")", "<", ">", "$(", "&", "`"}


def fenced(page: Path) -> list[tuple[str, str, str]]:
    return [(m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer(page.read_text())]


def logical_lines(code: str) -> list[str]:
    return code.replace("\\\n", " ").splitlines()


def documented_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) for each potatoq command line in the docs."""
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        for kind, _, code in fenced(page):
            if kind not in SHELL_KINDS:
                continue
            for line in logical_lines(code):
                text = line.strip().removeprefix("$ ")
                if "potatoq" not in text or text.startswith("potatoq:"):
                    continue
                try:
                    lexer = shlex.shlex(text.replace("$(", " ( "), posix=True, punctuation_chars="|&;()<>")
                    lexer.whitespace_split = True
                    lexer.commenters = "#"
                    tokens = list(lexer)
                except ValueError:
                    continue
                for i, token in enumerate(tokens):
                    key, _, value = token.partition("=")
                    program = value if key.startswith("Exec") else token  # systemd ExecStart=…
                    if program != "potatoq" and not program.endswith("/potatoq"):
                        continue
                    if i and tokens[i - 1] in {"install", "-m", "manage.py"}:  # not this CLI
                        continue
                    argv: list[str] = []
                    for arg in tokens[i + 1 :]:
                        if arg in SEPARATORS:
                            break
                        argv.append(arg)
                    if argv and not argv[0].startswith("["):
                        found.append((f"{page.relative_to(DOCS)}: {text}", argv))
    return found


COMMANDS = documented_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) > 30
    assert {argv[argv.index("-A") + 2] for _, argv in COMMANDS if "-A" in argv} >= {
        "status",
        "queues",
        "dead",
        "inspect",
        "call",
        "result",
        "revoke",
        "purge",
        "schedule",
        "shell",
        "worker",
    }


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_command_parses(where, argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            assert exc.code == 0, f"{where}\n{err.getvalue()}"


RUNNABLE = [
    (f"{page.relative_to(DOCS)} block {n}", code)
    for page in sorted(DOCS.rglob("*.md"))
    for n, (kind, info, code) in enumerate(fenced(page))
    if kind == "sh" and info.split() == ["test"]
]


def test_there_are_runnable_blocks():
    assert len(RUNNABLE) >= 4


@pytest.mark.parametrize(("where", "code"), RUNNABLE, ids=[w for w, _ in RUNNABLE])
def test_documented_block_runs(where, code, tmp_path):
    (tmp_path / "proj.py").write_text("from tests.worker.proj import *  # noqa: F403 - the test app\n")
    (tmp_path / "marks").mkdir()
    script = f'set -euo pipefail\npotatoq() {{ "{sys.executable}" -m potatoq.cli "$@"; }}\n{code}'
    variables = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "POTATOQ_BROKER_URL": f"sqlite:///{tmp_path / 'potatoq.sqlite3'}",
        "POTATOQ_TEST_DIR": str(tmp_path / "marks"),
    }
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=variables,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{where}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
