"""Every operations command once against each broker of tests/factories (through the contract).

One test per broker walks through call → queues → revoke → purge → shell → result → dead
list/retry/purge → schedule → status/inspect with a live worker. A broker whose service
isn't reachable is skipped (a failure under CI=true), as in the contract suite.
"""

from __future__ import annotations

import time

import pytest

from potatoq.testing import drain

from .conftest import as_json, wait_for

pytestmark = pytest.mark.slow


def stats(any_cli) -> dict[str, dict]:
    return {row["queue"]: row for row in as_json(any_cli("queues", "--json"))}


def test_every_command_on_this_broker(broker_env, broker_client, any_cli):
    app = broker_client.app
    capabilities = app.broker.capabilities
    counts_delayed = getattr(capabilities, "full_stats", True)
    has_results = app.backend is not None

    # call, queues
    now_id = any_cli("call", "proj.add", "-a", "[2, 3]").stdout.strip()
    later = any_cli("call", "proj.add", "-a", "[1, 1]", "--countdown", "600")
    assert later.returncode == 0, later.stderr
    later_id = later.stdout.strip()
    assert any_cli("call", "proj.add", "-a", "[0, 0]", "-Q", "other").returncode == 0
    found = stats(any_cli)
    assert found["default"]["waiting"] == 1 and found["other"]["waiting"] == 1
    if counts_delayed:
        assert found["default"]["delayed"] == 1
    assert "default" in any_cli("queues").stdout

    # revoke, purge
    revoked = any_cli("revoke", later_id)
    assert (revoked.returncode, revoked.stdout.strip()) == (0, f"revoked {later_id}"), revoked.stderr
    if capabilities.revoke_deletes and counts_delayed:
        assert stats(any_cli)["default"]["delayed"] == 0
    purged = any_cli("purge", "-f", "-Q", "other")
    assert (purged.returncode, purged.stdout.strip()) == (0, "1 task deleted from other"), purged.stderr

    # shell: a task that fails (missing argument), so that it is dead-lettered
    shell = any_cli("shell", "-c", "print(app.send_task('proj.add', args=(7,)).id)")
    assert shell.returncode == 0, shell.stderr
    failing_id = shell.stdout.strip()
    drain(app, queues=["default"])

    # result
    if has_results:
        good = any_cli("result", now_id, "--json")
        assert (good.returncode, as_json(good)["result"]) == (0, 5), good.stderr
        bad = any_cli("result", failing_id)
        assert bad.returncode == 3 and "FAILURE" in bad.stdout
    else:
        assert any_cli("result", now_id).returncode == 2

    # dead letters
    (letter,) = as_json(any_cli("dead", "list", "--json"))
    assert (letter["id"], letter["task"], letter["args"]) == (failing_id, "proj.add", [7])
    assert letter["reason"].startswith("TypeError")
    if has_results:
        assert "Traceback" in letter["traceback"]
    assert failing_id in any_cli("dead", "list").stdout
    retried = any_cli("dead", "retry", failing_id)
    assert retried.returncode == 0, retried.stderr
    assert stats(any_cli)["default"]["waiting"] == 1
    drain(app, queues=["default"])
    assert any_cli("dead", "purge", "-f").stdout.strip() == "1 dead letter deleted"

    # schedule: next runs computed locally from beat_schedule, the last one read from the
    # fire times the broker recorded (as a worker's scheduler records them)
    schedule = any_cli("schedule", "--json", extra_env={"POTATOQ_TEST_BEAT": "60"})
    (entry,) = as_json(schedule)["entries"]
    assert (entry["schedule"], entry["last_run"]) == ("every 60s", None)
    fired = float(int(time.time()) // 60 * 60)
    assert app.broker.claim_fire_time("tick", fired, None)
    schedule = any_cli("schedule", "--json", extra_env={"POTATOQ_TEST_BEAT": "60"})
    assert as_json(schedule)["entries"][0]["last_run"] == fired

    # status and inspect, from a live worker's heartbeats
    worker = broker_env.worker("-c", "1", "-n", "every-broker@host")
    task = broker_client.block.delay("one", "release-one")
    broker_env.wait_marker("started-one")

    def running():
        body = as_json(any_cli("status", "--json"))
        return body if any(r["id"] == task.id for r in body["running"]) else None

    body = wait_for(running, what="the heartbeat to show the running task")
    assert body["online"] == 1 and body["workers"][0]["pid"] == worker.pid
    ping = any_cli("inspect", "ping", "-d", "every-broker@host")
    assert ping.returncode == 0 and "pong" in ping.stdout
    (active,) = next(iter(as_json(any_cli("inspect", "active", "--json")).values()))
    assert active["id"] == task.id
    broker_env.mark("release-one")
    assert worker.stop() == 0
