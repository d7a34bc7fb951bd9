"""Each operations command, run as a real subprocess against a temp SQLite broker.

Tasks are sent through the CLI (``call``) or the test app; they are run in this process
with ``potatoq.testing.drain`` where a command needs finished or dead tasks, so no worker
is needed here (``test_live.py`` has the ones that need live workers).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from potatoq.testing import drain

from .conftest import APP, ROOT, as_json

pytestmark = pytest.mark.usefixtures("client")


def queue(cli, name: str = "default") -> dict:
    rows = {row["queue"]: row for row in as_json(cli("queues", "--json"))}
    return rows.get(name, {"waiting": 0, "delayed": 0, "running": 0})


# -- call, queues ---------------------------------------------------------------------------


def test_call_prints_the_task_id_and_queues_counts_it(cli):
    done = cli("call", "proj.add", "-a", "[2, 3]")
    assert done.returncode == 0, done.stderr
    task_id = done.stdout.strip()
    assert str(uuid.UUID(task_id)) == task_id
    assert done.stderr == ""
    assert cli("call", "proj.add", "-a", "[1, 1]", "--countdown", "600").returncode == 0

    stats = queue(cli)
    assert (stats["waiting"], stats["delayed"], stats["running"]) == (1, 1, 0)
    assert stats["oldest_waiting_age"] >= 0 and stats["consumers"] == 0

    table = cli("queues")
    assert table.returncode == 0
    header, row = table.stdout.splitlines()
    assert header.split() == [
        "QUEUE", "WAITING", "DELAYED", "RUNNING", "OLDEST", "WAITING", "CONSUMERS", "PAUSED"
    ]  # fmt: skip
    assert row.split()[:4] == ["default", "1", "1", "0"] and row.split()[-1] == "-"
    consumers_end = header.index("CONSUMERS") + len("CONSUMERS")
    assert row[:consumers_end].endswith(" 0") and not row[consumers_end].strip()  # right-aligned numbers


def test_call_options_reach_the_message(cli, client):
    done = cli(
        "call",
        "proj.add",
        "-a",
        "[1]",
        "-k",
        '{"y": 41}',
        "-Q",
        "other",
        "--priority",
        "5",
        "--task-id",
        "my-id",
    )
    assert (done.returncode, done.stdout.strip()) == (0, "my-id")
    assert queue(cli, "other")["waiting"] == 1
    drain(client.app, queues=["other"])
    result = cli("result", "my-id", "--json")
    assert result.returncode == 0
    assert as_json(result)["result"] == 42


def test_call_warns_about_a_task_the_app_does_not_have(cli):
    done = cli("call", "proj.typo")
    assert done.returncode == 0
    assert "'proj.typo' isn't a task of app 'proj'; sending it anyway" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-a", "{2"], "argument -a/--args: --args isn't valid JSON"),
        (["-a", '{"x": 1}'], "--args must be a JSON array, got dict"),
        (["-k", "[1]"], "--kwargs must be a JSON object, got list"),
        (["--countdown", "soon"], "expected seconds, got 'soon'"),
        (["--eta", "tomorrow"], "expected an ISO 8601 time"),
        (["--countdown", "1", "--eta", "2030-01-01T00:00:00"], "not allowed with argument"),
    ],
)
def test_call_rejects_bad_arguments_with_exit_2(cli, args, message):
    done = cli("call", "proj.add", *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_call_with_eta_and_expires_is_delayed(cli):
    assert (
        cli(
            "call", "proj.add", "-a", "[1, 2]", "--eta", "2099-01-01T00:00:00", "--expires", "3600"
        ).returncode
        == 0
    )
    assert queue(cli)["delayed"] == 1


# -- result ---------------------------------------------------------------------------------


def test_result_of_a_success_a_failure_and_an_unknown_id(cli, client):
    good = client.add.delay(2, 3)
    bad = client.app.send_task("proj.add", args=(1,))  # TypeError in the worker: missing argument
    drain(client.app)

    done = cli("result", good.id)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines() if line.strip())
    assert lines["state"] == "SUCCESS" and lines["result"] == "5" and lines["task"] == "proj.add"

    done = cli("result", bad.id)
    assert done.returncode == 3
    assert "state   FAILURE" in done.stdout
    assert "result  TypeError: add() missing 1 required positional argument: 'y'" in done.stdout
    assert "Traceback (most recent call last)" in done.stdout
    body = as_json(cli("result", bad.id, "--json"))
    assert body["state"] == "FAILURE" and body["result"]["exc_type"] == "TypeError"
    assert "Traceback" in body["traceback"]

    done = cli("result", "no-such-id")
    assert done.returncode == 4
    assert "state   PENDING" in done.stdout


def test_result_wait_returns_when_the_task_finishes(env, client):
    task = client.add.delay(20, 22)
    waiting = subprocess.Popen(
        [sys.executable, "-m", "potatoq.cli", "-A", APP, "result", task.id, "--wait", "60", "--json"],
        cwd=ROOT,
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        drain(client.app)
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    assert '"result": 42' in out


def test_result_wait_times_out_as_not_ready(cli, client):
    task = client.add.apply_async((1, 2), countdown=600)
    done = cli("result", task.id, "--wait", "0.2")
    assert done.returncode == 4
    assert "PENDING" in done.stdout


def test_result_without_a_result_backend_says_how_to_get_one(cli):
    done = cli("--result-backend", "disabled", "result", "abc")
    assert done.returncode == 2
    assert done.stderr.startswith("potatoq: error: potatoq result needs stored results")
    assert "--result-backend" in done.stderr


# -- revoke, purge --------------------------------------------------------------------------


def test_revoke_removes_waiting_tasks_and_reports_the_rest(cli, client):
    later = client.add.apply_async((1, 2), countdown=600)
    done = cli("revoke", later.id, "unknown-id")
    assert done.returncode == 3
    assert done.stdout.strip() == f"revoked {later.id}"
    assert "unknown-id isn't waiting (running, finished or unknown): not revoked" in done.stderr
    assert queue(cli)["delayed"] == 0
    state = cli("result", later.id, "--json")
    assert (state.returncode, as_json(state)["state"]) == (3, "REVOKED")
    assert cli("revoke", client.add.delay(1, 1).id).returncode == 0


def test_purge_asks_first_and_deletes_only_waiting_tasks_of_the_queues_named(cli, client):
    for q in ("a", "b", "c"):
        client.add.apply_async((1, 2), queue=q)
    client.add.apply_async((1, 2), queue="a", countdown=600)

    declined = cli("purge", "-Q", "a")  # stdin is empty: the answer is no
    assert declined.returncode == 5
    assert "Delete 2 waiting tasks from a? There is no undo." in declined.stderr
    assert queue(cli, "a")["waiting"] == 1

    answered = cli("purge", "-Q", "a", input="y\n")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip() == "2 tasks deleted from a"

    forced = cli("purge", "-f", "--all-queues", "-X", "c")
    assert (forced.returncode, forced.stdout.strip()) == (0, "1 task deleted from b")
    assert queue(cli, "b")["waiting"] == 0 and queue(cli, "c")["waiting"] == 1


@pytest.mark.parametrize("queues", [[], ["-Q", ""], ["-Q", ","], ["-Q", " , "], ["-Q", "a", "-Q", ""]])
def test_purge_without_queues_named_is_a_usage_error_and_deletes_nothing(cli, client, queues):
    client.add.apply_async((1, 2), queue="a")
    refused = cli("purge", "-f", *queues)
    assert refused.returncode == 2
    assert "--all-queues" in refused.stderr and "Traceback" not in refused.stderr
    assert queue(cli, "a")["waiting"] == 1


def test_purge_all_queues_takes_the_explicit_flag(cli, client):
    for q in ("a", "b"):
        client.add.apply_async((1, 2), queue=q)
    done = cli("purge", "-f", "--all-queues")
    assert (done.returncode, done.stdout.strip()) == (0, "2 tasks deleted from a, b"), done.stderr
    assert cli("purge", "-f", "--all-queues", "-Q", "a").returncode == 2


# -- dead letters ---------------------------------------------------------------------------


def make_dead(client, n: int = 2) -> list[str]:
    ids = [client.app.send_task("proj.add", args=(i,)).id for i in range(n)]  # each fails: missing argument
    drain(client.app)
    return ids


def test_dead_list_shows_reason_traceback_and_payload(cli, client):
    first, second = make_dead(client)
    table = cli("dead", "list")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["ID", "TASK", "QUEUE", "DIED", "DELIVERIES", "REASON"]
    assert [line.split()[0] for line in lines[1:]] == [second, first]  # newest first
    assert "TypeError: add() missing 1 required positional argument: 'y'" in lines[1]

    letters = as_json(cli("dead", "list", "--json"))
    assert [d["id"] for d in letters] == [second, first]
    assert letters[1]["args"] == [0] and letters[1]["task"] == "proj.add" and letters[1]["queue"] == "default"
    assert letters[1]["traceback"].startswith("Traceback (most recent call last)")
    assert letters[1]["reason"].startswith("TypeError")

    blocks = cli("dead", "list", "--traceback").stdout
    assert blocks.count("Traceback (most recent call last)") == 2

    limited = cli("dead", "list", "--limit", "1")
    assert len(limited.stdout.splitlines()) == 2
    assert "showing the newest 1" in limited.stderr
    assert cli("dead", "list", "--limit", "0").returncode == 2


def test_dead_retry_puts_letters_back_and_reports_unknown_ids(cli, client):
    first, second = make_dead(client)
    done = cli("dead", "retry", first)
    assert (done.returncode, done.stdout.strip()) == (0, "1 dead letter put back on their queue")
    assert queue(cli)["waiting"] == 1

    missing = cli("dead", "retry", "nope")
    assert missing.returncode == 3
    assert "1 of 1 not retried" in missing.stderr

    assert cli("dead", "retry").returncode == 2  # neither ids nor --all
    assert cli("dead", "retry", "--all", second).returncode == 2
    everything = cli("dead", "retry", "--all")
    assert everything.stdout.strip() == "1 dead letter put back on their queue"
    assert queue(cli)["waiting"] == 2


def test_dead_purge_asks_unless_forced(cli, client):
    make_dead(client)
    declined = cli("dead", "purge")
    assert declined.returncode == 5
    assert "Delete 2 dead letters? There is no undo." in declined.stderr
    assert len(as_json(cli("dead", "list", "--json"))) == 2
    done = cli("dead", "purge", "-f")
    assert (done.returncode, done.stdout.strip()) == (0, "2 dead letters deleted")
    assert cli("dead", "list").stdout.strip() == "no dead letters"


# -- schedule -------------------------------------------------------------------------------


def test_schedule_lists_entries_and_their_next_run(cli):
    before = time.time()  # the command computes the next run after its own, later, clock reading
    done = cli("schedule", "--json", "-n", "3", extra_env={"POTATOQ_TEST_BEAT": "30"})
    assert done.returncode == 0, done.stderr
    body = as_json(done)
    (entry,) = body["entries"]
    assert (entry["name"], entry["task"], entry["schedule"]) == ("tick", "proj.tick", "every 30s")
    assert entry["next_run"] % 30 == 0 and before < entry["next_run"] <= time.time() + 30
    assert len(entry["next_runs"]) == 3

    table = cli("schedule", extra_env={"POTATOQ_TEST_BEAT": "30"})
    header = ["NAME", "TASK", "SCHEDULE", "LAST", "RUN", "NEXT", "RUN", "IN"]
    assert table.stdout.splitlines()[0].split() == header
    assert "every 30s" in table.stdout
    assert entry["last_run"] is None  # nothing fired yet

    assert cli("schedule").stdout.strip() == "no periodic tasks (beat_schedule is empty)"


def test_schedule_shows_crontab_times_in_the_app_timezone(cli, tmp_path: Path):
    (tmp_path / "cronapp.py").write_text(
        "from potatoq import Potatoq\n"
        "from potatoq.schedules import crontab\n"
        "app = Potatoq('cronapp', timezone='Europe/Berlin')\n"
        "nightly = {'task': 'cronapp.report', 'schedule': crontab(minute=0, hour=3)}\n"
        "app.conf.beat_schedule = {'nightly': nightly}\n"
    )
    done = cli("schedule", "--json", "-n", "2", app="cronapp", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    body = as_json(done)
    assert body["timezone"] == "Europe/Berlin"
    (entry,) = body["entries"]
    assert entry["schedule"] == "cron 0 3 * * *"
    assert all(" 03:00:00+0" in run for run in entry["next_runs"])


# -- shell, status ----------------------------------------------------------------------------


def test_shell_runs_piped_code_with_app_and_tasks_loaded(cli):
    done = cli("shell", input="r = add.delay(2, 3)\nprint(app.main, r.id)\n")
    assert done.returncode == 0, done.stderr
    main, task_id = done.stdout.split()
    assert main == "proj"
    assert queue(cli)["waiting"] == 1
    assert cli(
        "shell", "-c", "print(sorted(k for k in ('add', 'block', 'chain') if k in globals()))"
    ).stdout == ("['add', 'block', 'chain']\n")


def test_shell_code_that_raises_exits_1_with_its_traceback(cli):
    done = cli("shell", "-c", "1 / 0")
    assert done.returncode == 1
    assert "ZeroDivisionError" in done.stderr


def test_status_without_workers_exits_3(cli, client):
    client.add.delay(1, 2)
    done = cli("status")
    assert done.returncode == 3
    assert "0 workers online" in done.stdout
    assert "default" in done.stdout
    body = as_json(cli("status", "--json"))
    assert body["online"] == 0 and body["workers"] == [] and body["queues"][0]["waiting"] == 1
