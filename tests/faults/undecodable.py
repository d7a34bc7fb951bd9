"""Checks that every operator listing shows dead letters whose payload can't be decoded:
``potatoq dead list`` (table, ``--traceback``, ``--json``) and the dashboard's ``/``,
``/dead``, ``/metrics`` and task pages answer, list each one, and show its payload escaped
(no terminal escape, no raw newline, no live HTML) and cut short."""

from __future__ import annotations

import json
import subprocess
import sys

from potatoq import Potatoq

from .harness import ROOT, FaultEnv

#: What any listing may show of a payload (the --json preview, plus the size note).
LONGEST_PREVIEW = 4096 + 40


def _dead_list(env: FaultEnv, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "potatoq.cli", "-A", "tests.faults.proj", "dead", "list", *args],
        cwd=ROOT,
        env=env.environ(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "\x1b" not in done.stdout, "a terminal escape sequence from a payload was printed"
    return done.stdout


def dead_list_shows_undecodable(env: FaultEnv, ids: set[str], hostile: str) -> None:
    table = _dead_list(env)
    assert all(task_id in table for task_id in ids), table
    detailed = _dead_list(env, "--traceback")
    assert not any(line.startswith("WARNING forged line") for line in detailed.splitlines()), detailed
    assert "payload: \\x1b[2J\\x1b[31m<script>" in detailed, detailed
    listed = {entry["id"]: entry for entry in json.loads(_dead_list(env, "--json"))}
    assert ids <= set(listed), sorted(listed)
    for task_id in ids:
        entry = listed[task_id]
        assert entry["payload_error"] == entry["reason"].removeprefix("undecodable message: "), entry
        assert len(entry["payload"]) <= LONGEST_PREVIEW, (task_id, len(entry["payload"]))
    shown = listed[hostile]["payload"]
    assert shown.startswith("\\x1b[2J\\x1b[31m<script>alert(1)</script>\\r\\nWARNING forged line\\xffxxx"), (
        shown
    )
    assert shown.endswith(f"… ({listed[hostile]['payload_bytes']} bytes)"), shown[-60:]


def dashboard_shows_undecodable(app: Potatoq, ids: set[str], hostile: str) -> None:
    from starlette.testclient import TestClient

    from potatoq.dashboard import create_app

    with TestClient(create_app(app, sample_every=0), base_url="http://127.0.0.1:5555") as board:
        for path in ("/", "/metrics"):
            page = board.get(path)
            assert page.status_code == 200, (path, page.text[-2000:])
        assert "potatoq_dead_letters" in board.get("/metrics").text
        dead = board.get("/dead")
        assert dead.status_code == 200, dead.text[-2000:]
        assert all(task_id in dead.text for task_id in ids)
        assert "<script>alert(1)" not in dead.text, "a payload's HTML reached the page unescaped"
        assert "\\x1b[2J\\x1b[31m&lt;script&gt;alert(1)&lt;/script&gt;\\r\\nWARNING" in dead.text
        for task_id in ids:
            page = board.get(f"/tasks/{task_id}")
            assert page.status_code == 200, (task_id, page.text[-2000:])
            assert "The payload can't be decoded" in page.text, task_id
        assert "&lt;script&gt;alert(1)" in board.get(f"/tasks/{hostile}").text
