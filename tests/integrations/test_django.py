"""Django: the test project (djproj) on SQLite and PostgreSQL, driven through manage.py.

Every case runs in real subprocesses: ``manage.py migrate`` (which also creates the broker
tables), ``manage.py scenario …`` (sends tasks inside ``transaction.atomic()`` and reports
what the broker saw before and after COMMIT), and a real worker or ``drain``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from .djangoproject import DjangoProject, postgres_database

pytest.importorskip("django")

LAYOUTS = ["sqlite", "postgres", "sqlite+other-broker", "postgres+other-broker"]
SAME_DATABASE = ["sqlite", "postgres"]


@contextlib.contextmanager
def make_project(layout: str, tmp_path: Path) -> Iterator[DjangoProject]:
    broker = f"sqlite:///{tmp_path / 'broker.sqlite3'}" if layout.endswith("other-broker") else None
    if layout.startswith("postgres"):
        with postgres_database() as url:
            project = DjangoProject(url, broker)
            project.manage("migrate", "-v0")
            yield project
    else:
        project = DjangoProject(f"sqlite:///{tmp_path / 'db.sqlite3'}", broker)
        project.manage("migrate", "-v0")
        yield project


@pytest.fixture(params=LAYOUTS)
def project(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DjangoProject]:
    with make_project(request.param, tmp_path) as p:
        yield p


@pytest.fixture(params=SAME_DATABASE)
def same_db_project(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DjangoProject]:
    with make_project(request.param, tmp_path) as p:
        yield p


def test_tasks_follow_the_transaction(project: DjangoProject) -> None:
    seen = project.scenario("all")
    same_db = project.broker is None
    commit = seen["commit"]
    # Inside atomic() nothing is visible to the broker's own connection yet …
    assert commit["inside"]["outside"] == 0
    # … and with the broker in the same database the row is already written in the transaction.
    assert commit["inside"]["in_transaction"] == (1 if same_db else None)
    assert commit["after"] == 1
    assert seen["rollback"]["after"] == 0
    assert seen["savepoint"]["after"] == 1  # the task sent in the rolled-back savepoint is gone
    opt_out = seen["opt_out"]
    assert opt_out["sent_inside"] == 1  # enqueue_on_commit=False: sent before COMMIT
    assert opt_out["after"] == 1  # … and kept; delay_on_commit's task was rolled back

    ran = project.scenario("drain")["ran"]
    assert ran == 3  # commit, savepoint's outer, the opted-out audit
    report = project.scenario(
        "report",
        commit["id"],
        seen["rollback"]["id"],
        seen["savepoint"]["outer"],
        seen["savepoint"]["inner"],
        opt_out["now"],
        opt_out["follows"],
    )
    states = report["states"]
    assert states[commit["id"]] == "SUCCESS"
    assert states[seen["savepoint"]["outer"]] == "SUCCESS"
    assert states[opt_out["now"]] == "SUCCESS"
    for never in (seen["rollback"]["id"], seen["savepoint"]["inner"], opt_out["follows"]):
        assert states[never] == "PENDING"
    assert sorted(report["events"]) == ["audit:sent-now", "mark_paid", "mark_paid"]
    assert [item for item, paid in report["orders"].values() if paid] == ["committed", "outer"]


def test_settings_reach_the_app(tmp_path: Path) -> None:
    with make_project("sqlite", tmp_path) as project:
        seen = project.scenario("all")
    assert seen["timezone"] == "Europe/Paris"  # TIME_ZONE
    assert seen["queue"] == "shop"  # POTATOQ = {"task_default_queue": "shop"}


def test_a_crash_right_after_commit_loses_nothing(same_db_project: DjangoProject) -> None:
    """The process dies right after COMMIT (an on_commit callback exits): the task still runs,
    because its row was committed with the order, not sent afterwards."""
    proc = same_db_project.manage("scenario", "crash", check=False)
    assert proc.returncode == 17, proc.stderr
    sent = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    task_id = __import__("json").loads(sent[0])["id"]
    with same_db_project.worker("-P", "solo"):
        report = same_db_project.scenario("wait", task_id)
    assert report["states"][task_id] == "SUCCESS"
    assert [item for item, paid in report["orders"].values() if paid] == ["crash"]


def test_real_worker_runs_committed_tasks_only(project: DjangoProject) -> None:
    seen = project.scenario("all")
    with project.worker("-c", "1"):
        report = project.scenario("wait", seen["commit"]["id"], seen["savepoint"]["outer"])
    assert set(report["states"].values()) == {"SUCCESS"}
    assert report["states"] == {seen["commit"]["id"]: "SUCCESS", seen["savepoint"]["outer"]: "SUCCESS"}
    after = project.scenario("report", seen["rollback"]["id"], seen["savepoint"]["inner"])
    assert set(after["states"].values()) == {"PENDING"}
    assert [item for item, paid in after["orders"].values() if paid] == ["committed", "outer"]
