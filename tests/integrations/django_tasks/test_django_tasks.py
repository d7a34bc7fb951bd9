"""django.tasks (Django 6) on potatoq's backend, in the test project (djproj), on SQLite and
PostgreSQL. Run by ``make test-django-tasks`` (Python 3.13); elsewhere skipped, except where
``POTATOQ_REQUIRE_DJANGO_TASKS=1`` says this run must have Django 6.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..djangoproject import DjangoProject, postgres_database, require_cli

if importlib.util.find_spec("django") is None or importlib.util.find_spec("django.tasks") is None:
    if os.environ.get("POTATOQ_REQUIRE_DJANGO_TASKS"):
        raise RuntimeError("POTATOQ_REQUIRE_DJANGO_TASKS is set but django.tasks (Django 6) isn't installed")
    pytest.skip(
        "django.tasks needs Django 6 (Python >= 3.12): make test-django-tasks", allow_module_level=True
    )

QUEUES = ["reports", "default", "shop"]


@contextlib.contextmanager
def tasks_project(kind: str, tmp_path: Path) -> Iterator[DjangoProject]:
    env = {"DJPROJ_TASKS_BACKEND": "1", "DJPROJ_SIGNAL_LOG": str(tmp_path / "signals.log")}
    if kind == "postgres":
        with postgres_database() as url:
            project = DjangoProject(url, **env)
            project.manage("migrate", "-v0")
            yield project
    else:
        project = DjangoProject(f"sqlite:///{tmp_path / 'db.sqlite3'}", **env)
        project.manage("migrate", "-v0")
        yield project


@pytest.fixture(params=["sqlite", "postgres"])
def project(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DjangoProject]:
    with tasks_project(request.param, tmp_path) as p:
        yield p


def dtasks(project: DjangoProject, action: str, *ids: str) -> Any:
    proc = project.manage("dtasks", action, *ids)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def signals(tmp_path: Path) -> list[tuple[str, str, str, str]]:
    lines = (tmp_path / "signals.log").read_text().splitlines()
    return [tuple(line.split()) for line in lines]  # type: ignore[misc]


def check_outcomes(sent: dict[str, Any], results: dict[str, Any]) -> None:
    def of(name: str) -> dict[str, Any]:
        return results[sent[name]]

    assert of("high")["status"] == "SUCCESSFUL" and of("high")["value"] == 30
    assert of("high")["priority"] == 50 and of("high")["queue"] == "reports"
    assert of("async")["value"] == 42  # an async def task
    assert of("attempt")["value"] == 1  # takes_context: context.attempt
    assert of("boom")["status"] == "FAILED" and of("boom")["errors"] == ["builtins.ValueError"]
    assert of("committed")["status"] == "SUCCESSFUL"
    # Priorities: the high-priority task, sent last, started before both low ones.
    assert of("high")["started_at"] < of("low1")["started_at"] < of("low2")["started_at"]
    # run_after is kept by the broker: the task didn't start before it.
    later = of("later")
    assert later["status"] == "SUCCESSFUL"
    assert dt.datetime.fromisoformat(later["started_at"]) >= dt.datetime.fromisoformat(sent["run_after"])
    for result in results.values():
        assert (
            result["attempts"] == 1 and result["finished_at"] >= result["started_at"] >= result["enqueued_at"]
        )


def test_tasks_run_with_priorities_run_after_async_and_results(
    project: DjangoProject, tmp_path: Path
) -> None:
    sent = dtasks(project, "send")
    # get_result() in the sending process, before any worker ran: READY with its arguments.
    assert sent["ready"]["status"] == "READY" and sent["ready"]["args"] == [3]
    assert sent["later_ready"]["status"] == "READY"
    # Enqueued inside a rolled-back atomic(): never stored, never run.
    assert sent["rolled_back_found"] is False
    names = [k for k in sent if k not in ("ready", "later_ready", "rolled_back_found", "run_after", "shared")]
    ran = project.scenario("drain", *QUEUES)["ran"]
    assert ran == len(names) - 1 + 1  # every task but the rolled-back one, plus the @shared_task
    results = dtasks(project, "results", *(sent[n] for n in names))
    assert results[sent["rolled_back"]] is None
    del results[sent["rolled_back"]]
    check_outcomes(sent, results)
    seen = signals(tmp_path)
    enqueued = [s for s in seen if s[1] == "enqueued"]
    assert len(enqueued) == len(names) - 1  # not the rolled-back one: sent after COMMIT
    started = [s for s in seen if s[1] == "started"]
    finished = {(s[2], s[3]) for s in seen if s[1] == "finished"}
    assert len(started) == len(names) - 1
    assert ("boom", "FAILED") in finished and ("high", "SUCCESSFUL") in finished


def test_one_real_worker_runs_django_tasks_and_shared_tasks(project: DjangoProject, tmp_path: Path) -> None:
    require_cli()
    sent = dtasks(project, "send")
    names = ["low1", "low2", "high", "async", "attempt", "boom", "later", "committed"]
    with project.worker("-P", "solo", "-Q", ",".join(QUEUES)):
        results = dtasks(project, "wait", *(sent[n] for n in names))
        shared = project.scenario("wait", sent["shared"])
    check_outcomes(sent, results)
    assert shared["states"][sent["shared"]] == "SUCCESS"  # the @shared_task, same worker
    assert all(result["attempts"] == 1 for result in results.values())
    worker_pids = {s[0] for s in signals(tmp_path) if s[1] in ("started", "finished")}
    assert len(worker_pids) == 1  # started/finished are sent by the worker process
