"""``status`` and ``inspect`` against a real worker subprocess, read from its heartbeats."""

from __future__ import annotations

import socket
import subprocess

import pytest

from .conftest import ROOT, as_json, wait_for

pytestmark = pytest.mark.slow


def running_now(cli, task_id: str) -> dict | None:
    """The status JSON once the heartbeat shows ``task_id`` running, else None."""
    body = as_json(cli("status", "--json"))
    return body if any(r["id"] == task_id for r in body["running"]) else None


def probe(env, node: str) -> int:
    """docs/deployment.md's liveness probe: fails only on exit 3 (no fresh heartbeat)."""
    import sys

    command = (
        f'"{sys.executable}" -m potatoq.cli -A tests.worker.proj inspect ping -d "{node}" >/dev/null 2>&1'
    )
    done = subprocess.run(["sh", "-c", f"{command}; test $? -ne 3"], env=env.vars, cwd=str(ROOT), check=False)
    return done.returncode


def test_status_and_inspect_show_what_each_process_runs(env, client, cli):
    worker = env.worker("-c", "2", "-Q", "default,extra")  # default node name: potatoq@HOSTNAME
    task = client.block.delay("one", "release-one")
    env.wait_marker("started-one")
    body = wait_for(lambda: running_now(cli, task.id), what="the heartbeat to show the running task")

    (node,) = body["workers"]
    name = node["node"]
    assert name.startswith(f"potatoq@{socket.gethostname()}:") and node["state"] == "online"
    assert node["queues"] == ["default", "extra"] and node["concurrency"] == 2 and node["pid"] == worker.pid
    (run,) = node["running"]
    assert run["task"] == "proj.block" and run["pid"] in worker.children() and run["runtime"] >= 0
    assert body["online"] == 1
    assert {q["queue"]: q["consumers"] for q in body["queues"]} == {"default": 1, "extra": 1}

    text = cli("status")
    assert text.returncode == 0
    assert "1 worker online" in text.stdout
    lines = text.stdout.splitlines()
    assert lines[2].split()[:2] == ["NODE", "STATE"]
    assert lines[3].split()[:2] == [name, "online"]
    running = next(i for i, line in enumerate(lines) if line.startswith("NODE") and "RUNNING FOR" in line)
    assert lines[running + 1].split()[:4] == [name, str(run["pid"]), "proj.block", task.id]

    active = cli("inspect", "active", "--json")
    assert active.returncode == 0
    (reply,) = as_json(active)[name]
    assert (reply["id"], reply["name"], reply["worker_pid"]) == (task.id, "proj.block", run["pid"])
    assert f"* proj.block[{task.id}] pid {run['pid']}, running for" in cli("inspect", "active").stdout

    assert as_json(cli("inspect", "ping", "--json")) == {name: {"ok": "pong"}}
    ping = cli("inspect", "ping", "-d", f"potatoq@{socket.gethostname()}")  # as the k8s probe does
    assert ping.stdout.splitlines() == [f"-> {name}: OK", "    pong", "", "1 node online."]
    registered = as_json(cli("inspect", "registered", "--json", "-d", name))[name]
    assert "proj.add" in registered and "proj.block" in registered
    stats = as_json(cli("inspect", "stats", "--json"))[name]
    assert stats["pid"] == worker.pid and stats["pool"]["max-concurrency"] == 2
    queues = as_json(cli("inspect", "active_queues", "--json"))
    assert queues == {name: [{"name": q, "routing_key": q} for q in ("default", "extra")]}

    elsewhere = cli("inspect", "ping", "-d", "other@host")
    assert elsewhere.returncode == 3
    assert "no worker named other@host online" in elsewhere.stderr
    assert probe(env, f"potatoq@{socket.gethostname()}") == 0
    assert probe(env, "other@host") != 0

    env.mark("release-one")
    assert task.get(timeout=30) == run["pid"]
    assert worker.stop() == 0
    after = cli("status", "--json")  # a clean shutdown forgets the node
    assert after.returncode == 3 and as_json(after)["workers"] == []
