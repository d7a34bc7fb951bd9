"""getting-started/first-steps-with-celery.rst: ``tasks.py`` and ``celeryconfig.py`` in a
directory of their own, the worker started there as ``celery -A tasks worker
--loglevel=INFO`` (plus ``-Q low-priority``, the queue the config routes ``tasks.add`` to)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import HERE, World

DIR = HERE / "first_steps"
TIMEOUT = 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tasks(world: World):
    world.worker("tasks", "--loglevel=INFO", "-Q", "low-priority", path=DIR)
    sys.path.insert(0, str(DIR))
    try:
        import tasks

        yield from world.point(tasks.app)
    finally:
        sys.path.remove(str(DIR))


def test_calling_the_task_and_keeping_results(tasks):
    from tasks import add  # close and reopen to get updated 'app'

    result = add.delay(4, 4)
    assert result.get(timeout=TIMEOUT) == 8
    assert result.ready() is True
    result = add.delay(4, "4")
    exc = result.get(propagate=False, timeout=TIMEOUT)
    assert isinstance(exc, TypeError)
    assert "Traceback (most recent call last)" in result.traceback
    assert result.backend is tasks.broker  # rpc://: results travel through the broker


def test_configuration(tasks):
    assert tasks.conf.task_serializer == "json"
    tasks.conf.update(
        task_serializer="json",
        accept_content=["json"],  # Ignore other content
        result_serializer="json",
        timezone="Europe/Oslo",
        enable_utc=True,
    )
    assert tasks.conf.timezone == "Europe/Oslo"
    # the routing and the rate limit of celeryconfig.py
    assert tasks.make_message("tasks.add", (1, 2)).queue == "low-priority"
    assert tasks.tasks["tasks.add"].rate_limit == "10/m"


def test_config_module_imports():
    done = subprocess.run(
        [sys.executable, "-m", "celeryconfig"],
        cwd=DIR,
        capture_output=True,
        env={"PYTHONPATH": f"{DIR.parents[2]}"},
    )
    assert done.returncode == 0, done.stderr
