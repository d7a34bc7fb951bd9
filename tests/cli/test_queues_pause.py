"""``potatoq queues pause NAME`` / ``resume NAME`` and how ``queues`` and ``status`` show a
paused queue, on every broker processes can share."""

from __future__ import annotations

from .conftest import as_json


def test_pause_and_resume_from_the_command_line(broker_env, broker_client, any_cli):
    app = broker_client.app
    done = any_cli("queues", "pause", "reports")
    assert (done.returncode, done.stdout.strip()) == (0, "queue 'reports' paused"), done.stderr
    assert any_cli("queues", "pause", "reports").stdout.strip() == "queue 'reports' was paused already"
    assert set(app.control.paused_queues()) == {"reports"}
    # listed although nothing was ever sent to it, and marked paused
    rows = {row["queue"]: row for row in as_json(any_cli("queues", "--json"))}
    assert rows["reports"]["paused"] is True and rows["reports"]["waiting"] == 0
    table = any_cli("queues").stdout
    assert "PAUSED" in table.splitlines()[0]
    assert any(line.startswith("reports") and "paused" in line for line in table.splitlines())
    status = as_json(any_cli("status", "--json"))
    assert [q["paused"] for q in status["queues"] if q["queue"] == "reports"] == [True]
    done = any_cli("queues", "resume", "reports")
    assert (done.returncode, done.stdout.strip()) == (0, "queue 'reports' resumed"), done.stderr
    assert any_cli("queues", "resume", "reports").stdout.strip() == "queue 'reports' wasn't paused"
    assert app.control.paused_queues() == {}


def test_celery_names_the_default_queue(cli, client):
    assert cli("queues", "pause", "celery").returncode == 0
    assert set(client.app.control.paused_queues()) == {"default"}


def test_a_bad_queue_name_is_an_error_naming_it(cli):
    done = cli("queues", "pause", "no spaces")
    assert done.returncode != 0
    assert "invalid queue name 'no spaces'" in done.stderr


def test_pause_needs_a_name(cli):
    done = cli("queues", "pause")
    assert done.returncode == 2 and "NAME" in done.stderr
