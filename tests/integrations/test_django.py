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

from .djangoproject import DjangoProject, postgres_database, require_cli

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


def test_the_default_database_is_the_broker_and_tasks_are_discovered(tmp_path: Path) -> None:
    conf = DjangoProject(f"sqlite:///{tmp_path / 'db.sqlite3'}").scenario("conf")
    assert conf["broker"] == f"sqlite:///{tmp_path / 'db.sqlite3'}"
    assert conf["tasks"] == ["shop.tasks.audit", "shop.tasks.mark_paid"]  # shop/tasks.py, autodiscovered
    assert conf["main"] == "djproj"
    with postgres_database() as url:
        conf = DjangoProject(url).scenario("conf")
    assert conf["broker"] == url


def test_celery_settings_are_read_and_the_potatoq_dict_wins(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    celery_only = {
        "POTATOQ": None,
        "CELERY_TASK_DEFAULT_QUEUE": "celeryq",
        "CELERY_RESULT_EXPIRES": 60,
        "CELERY_TIMEZONE": "UTC",
    }
    conf = DjangoProject(database, settings=celery_only).scenario("conf")
    assert (conf["queue"], conf["result_expires"], conf["timezone"]) == ("celeryq", 60, "UTC")
    both = {**celery_only, "POTATOQ": {"task_default_queue": "dictq"}}
    conf = DjangoProject(database, settings=both).scenario("conf")
    assert (conf["queue"], conf["result_expires"]) == ("dictq", 60)


CHECKS = [
    # (broker, extra settings, check --deploy?, the check id expected)
    ("bogus://somewhere", {}, False, "potatoq.E001"),
    (
        None,
        {"DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}},
        False,
        "potatoq.W002",
    ),
    ("sqlite:///{tmp}/other.sqlite3", {}, False, "potatoq.W003"),
    ("sqlite:///relative.sqlite3", {}, False, "potatoq.W004"),
    (None, {"POTATOQ": {"brokr_url": "redis://"}}, False, "potatoq.W005"),
    ("memory://", {}, True, "potatoq.E006"),
    (None, {"POTATOQ": {"task_always_eager": True}}, True, "potatoq.W007"),
]


@pytest.mark.parametrize(("broker", "settings", "deploy", "expected"), CHECKS, ids=[c[3] for c in CHECKS])
def test_system_checks_name_the_misconfiguration(
    tmp_path: Path, broker: str | None, settings: dict, deploy: bool, expected: str
) -> None:
    project = DjangoProject(
        f"sqlite:///{tmp_path / 'db.sqlite3'}",
        broker.replace("{tmp}", str(tmp_path)) if broker else None,
        settings,
    )
    proc = project.manage("check", *(["--deploy"] if deploy else []), check=False)
    output = proc.stdout + proc.stderr
    assert f"({expected})" in output, output
    found = {line.split(")")[0].split("(")[-1] for line in output.splitlines() if "(potatoq." in line}
    assert found == {expected} or (expected == "potatoq.W004" and found == {"potatoq.W003", "potatoq.W004"})
    if expected.startswith("potatoq.E"):
        assert proc.returncode != 0


def test_a_good_setup_passes_the_checks(tmp_path: Path) -> None:
    proc = DjangoProject(f"sqlite:///{tmp_path / 'db.sqlite3'}").manage("check")
    assert "no issues" in proc.stdout


def test_manage_py_potatoq_runs_every_cli_command(tmp_path: Path) -> None:
    require_cli()
    project = DjangoProject(f"sqlite:///{tmp_path / 'db.sqlite3'}")
    migrated = project.manage("potatoq", "migrate")
    assert f"sqlite:///{tmp_path / 'db.sqlite3'}" in migrated.stdout
    assert (tmp_path / "db.sqlite3").exists()
    usage = project.manage("potatoq", "--help")
    assert "worker" in usage.stdout and "migrate" in usage.stdout
    bad = project.manage("potatoq", "worker", "--concurrency", "zero", check=False)
    assert bad.returncode == 2


def test_real_worker_runs_committed_tasks_only(project: DjangoProject) -> None:
    seen = project.scenario("all")
    with project.worker("-c", "1"):
        report = project.scenario("wait", seen["commit"]["id"], seen["savepoint"]["outer"])
    assert set(report["states"].values()) == {"SUCCESS"}
    assert report["states"] == {seen["commit"]["id"]: "SUCCESS", seen["savepoint"]["outer"]: "SUCCESS"}
    after = project.scenario("report", seen["rollback"]["id"], seen["savepoint"]["inner"])
    assert set(after["states"].values()) == {"PENDING"}
    assert [item for item, paid in after["orders"].values() if paid] == ["committed", "outer"]


@pytest.mark.parametrize("layout", SAME_DATABASE)
def test_the_plain_potatoq_command_sets_django_up(layout: str, tmp_path: Path) -> None:
    """Containers start ``potatoq worker`` with DJANGO_SETTINGS_MODULE and no ``-A``: the
    worker is the one ``manage.py potatoq worker`` runs (the database is the broker)."""
    with make_project(layout, tmp_path) as project:
        seen = project.scenario("all")
        with project.worker("-c", "1", plain=True):
            report = project.scenario("wait", seen["commit"]["id"], seen["savepoint"]["outer"])
        assert report["states"] == {seen["commit"]["id"]: "SUCCESS", seen["savepoint"]["outer"]: "SUCCESS"}
        assert [item for item, paid in report["orders"].values() if paid] == ["committed", "outer"]
