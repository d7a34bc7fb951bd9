"""userguide/periodic-tasks.rst: ``on_after_configure`` + ``add_periodic_task``,
``beat_schedule`` with float seconds, ``timedelta`` and ``crontab``, run by a live worker
(every potatoq worker runs the scheduler: Celery's ``worker -B``)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from potatoq.schedules import crontab, resolve_timezone

from .conftest import World, wait_for

APP = "tests.celery_guide.beat_app"
TIMEOUT = 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def beat(world: World):
    return world.worker(APP, "-l", "INFO", "-c", "1")


def _count(worker, line):
    return worker.output().splitlines().count(line)


def test_entries_from_on_after_configure_and_beat_schedule_run(beat):
    wait_for(
        lambda: _count(beat, "hello") >= 3 and _count(beat, "2") >= 2,
        timeout=TIMEOUT,
        what="test('hello') and add(1, 1) fired repeatedly",
    )
    wait_for(
        lambda: "world" in beat.output() and "32" in beat.output().splitlines(),
        timeout=TIMEOUT,
        what="the 3-second entries",
    )
    log = beat.output()
    for name in (
        "add every 10",
        "add every 30",
        "add-every-30-seconds",
        "add-every-timedelta",
        "add-every-monday-morning",
    ):
        assert f"{name} (" in log, name
    # A new crontab entry first fires at its next boundary, not at start: nothing for Monday
    # 07:30 UTC, unless this worker really lived through one.
    monday = crontab(hour=7, minute=30, day_of_week=1)
    if monday.next_fire_after(beat.started_at, resolve_timezone("UTC")) > time.time():
        assert "Happy Mondays!" not in log.splitlines()


def test_entries_written_by_add_periodic_task():
    from tests.celery_guide.beat_app import app

    app.finalize()
    schedule = app.conf.beat_schedule
    assert schedule["add every 10"]["schedule"] == 1.0
    assert schedule["add every 10"]["args"] == ("hello",)
    unnamed = [spec for name, spec in schedule.items() if spec["args"] == ("world",)]
    assert unnamed[0]["options"] == {"expires": 10}
    monday = [spec for spec in schedule.values() if spec["args"] == ("Happy Mondays!",)]
    assert monday[0]["schedule"] == crontab(hour=7, minute=30, day_of_week=1)


def test_crontab_first_fires_on_its_next_boundary():
    from potatoq.worker.scheduler import Scheduler
    from tests.celery_guide.beat_app import app

    app.finalize()
    start = dt.datetime(2026, 3, 4, 10, 0, 5, tzinfo=dt.UTC).timestamp()  # a Wednesday
    scheduler = Scheduler(app, clock=lambda: start)
    scheduler.entries = scheduler._load(start)
    monday = next(e for e in scheduler.entries if e.name == "add-every-monday-morning")
    assert dt.datetime.fromtimestamp(monday.next_fire, dt.UTC) == dt.datetime(
        2026, 3, 9, 7, 30, tzinfo=dt.UTC
    )
    every = next(e for e in scheduler.entries if e.name == "add every 10")
    assert every.next_fire > start  # not at start


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        (crontab(), ["00:01", "00:02"]),
        (crontab(minute=0, hour=0), ["2026-03-05 00:00"]),
        (crontab(minute=0, hour="*/3"), ["03:00", "06:00", "09:00"]),
        (crontab(minute=0, hour="0,3,6,9,12,15,18,21"), ["03:00", "06:00", "09:00"]),
        (crontab(minute="*/15"), ["00:15", "00:30", "00:45"]),
        (crontab(day_of_week="sunday"), ["2026-03-08 00:00", "2026-03-08 00:01"]),
        (crontab(minute="*", hour="*", day_of_week="sun"), ["2026-03-08 00:00", "2026-03-08 00:01"]),
        (
            crontab(minute="*/10", hour="3,17,22", day_of_week="thu,fri"),
            ["2026-03-05 03:00", "2026-03-05 03:10"],
        ),
        (crontab(minute=0, hour="*/2,*/3"), ["02:00", "03:00", "04:00", "06:00", "08:00", "09:00"]),
        (crontab(minute=0, hour="*/5"), ["05:00", "10:00", "15:00", "20:00"]),
        (crontab(minute=0, hour="*/3,8-17"), ["03:00", "06:00", "08:00", "09:00", "10:00"]),
        (crontab(0, 0, day_of_month="2"), ["2026-04-02 00:00"]),
        (crontab(0, 0, day_of_month="2-30/2"), ["2026-03-06 00:00", "2026-03-08 00:00"]),
        (
            crontab(0, 0, day_of_month="1-7,15-21"),
            ["2026-03-05 00:00", "2026-03-06 00:00", "2026-03-07 00:00", "2026-03-15 00:00"],
        ),
        (crontab(0, 0, day_of_month="11", month_of_year="5"), ["2026-05-11 00:00"]),
        (crontab(0, 0, month_of_year="*/3"), ["2026-04-01 00:00", "2026-04-02 00:00"]),
    ],
)
def test_crontab_table(schedule, expected):
    utc = resolve_timezone("UTC")
    t = dt.datetime(2026, 3, 4, 0, 0, tzinfo=dt.UTC).timestamp()  # Wednesday 4 March 2026, midnight
    got = []
    for _ in expected:
        t = schedule.next_fire_after(t, utc)
        when = dt.datetime.fromtimestamp(t, dt.UTC)
        got.append(when.strftime("%H:%M" if len(expected[0]) == 5 else "%Y-%m-%d %H:%M"))
    assert got == expected
