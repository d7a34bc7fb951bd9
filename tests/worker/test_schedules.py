"""crontab and schedule: parsing and next fire times, including DST in Europe/Berlin."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from potatoq.schedules import ParseError, crontab, maybe_schedule, schedule

BERLIN = ZoneInfo("Europe/Berlin")
UTC = dt.UTC


def fires(sched, start: str, n: int, tz=BERLIN) -> list[str]:
    ts = dt.datetime.fromisoformat(start).timestamp()
    out = []
    for _ in range(n):
        ts = sched.next_fire_after(ts, tz)
        out.append(dt.datetime.fromtimestamp(ts, tz).isoformat())
    return out


@pytest.mark.parametrize(
    ("kwargs", "field", "expected"),
    [
        ({"minute": "*/15"}, "minute", {0, 15, 30, 45}),
        ({"minute": "5/20"}, "minute", {5, 25, 45}),
        ({"hour": "1-5"}, "hour", {1, 2, 3, 4, 5}),
        ({"hour": "22-2"}, "hour", {22, 23, 0, 1, 2}),
        ({"hour": [3, "7-8"]}, "hour", {3, 7, 8}),
        ({"minute": "0,30"}, "minute", {0, 30}),
        ({"day_of_week": "mon-fri"}, "day_of_week", {1, 2, 3, 4, 5}),
        ({"day_of_week": "sat,sun"}, "day_of_week", {6, 0}),
        ({"day_of_week": 7}, "day_of_week", {0}),
        ({"day_of_month": "1-30/10"}, "day_of_month", {1, 11, 21}),
        ({"month_of_year": "jan,jul-aug"}, "month_of_year", {1, 7, 8}),
    ],
)
def test_crontab_fields_parse_like_celery(kwargs, field, expected):
    assert getattr(crontab(**kwargs), field) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"minute": "60"}, "minute: 60 is out of range 0-59"),
        ({"hour": "x"}, "hour: can't read 'x'"),
        ({"day_of_month": "0"}, "day_of_month: 0 is out of range 1-31"),
        ({"minute": "*/0"}, "step must be at least 1"),
        ({"day_of_week": "mon,,tue"}, "empty item"),
    ],
)
def test_bad_crontab_fields_name_the_field(kwargs, message):
    with pytest.raises(ParseError, match=message.replace("(", r"\(")):
        crontab(**kwargs)


def test_crontab_next_fire_times_in_utc():
    assert fires(crontab(minute="*/15"), "2024-05-01T10:07:00+00:00", 3, UTC) == [
        "2024-05-01T10:15:00+00:00",
        "2024-05-01T10:30:00+00:00",
        "2024-05-01T10:45:00+00:00",
    ]
    # a boundary itself is not "after" it
    assert fires(crontab(minute=0), "2024-05-01T10:00:00+00:00", 1, UTC) == ["2024-05-01T11:00:00+00:00"]


def test_crontab_weekdays_and_month_days_must_both_match():
    # Fridays that are the 13th
    assert fires(crontab(0, 0, day_of_week="fri", day_of_month=13), "2024-01-01T00:00:00+01:00", 2) == [
        "2024-09-13T00:00:00+02:00",
        "2024-12-13T00:00:00+01:00",
    ]


def test_crontab_weekdays_only():
    assert fires(crontab(30, 9, day_of_week="mon-fri"), "2024-06-07T12:00:00+02:00", 2) == [
        "2024-06-10T09:30:00+02:00",
        "2024-06-11T09:30:00+02:00",
    ]


def test_crontab_leap_day_and_impossible_dates():
    assert fires(crontab(0, 0, day_of_month=29, month_of_year=2), "2024-03-01T00:00:00+01:00", 1) == [
        "2028-02-29T00:00:00+01:00"
    ]
    with pytest.raises(ValueError, match="never fires"):
        crontab(0, 0, day_of_month=30, month_of_year=2).next_fire_after(0.0)


def test_daily_job_in_the_skipped_hour_runs_once_shifted_forward():
    # 2024-03-31: Berlin jumps from 02:00 CET to 03:00 CEST; 02:30 doesn't exist that day
    assert fires(crontab(minute=30, hour=2), "2024-03-30T12:00:00+01:00", 3) == [
        "2024-03-31T03:30:00+02:00",
        "2024-04-01T02:30:00+02:00",
        "2024-04-02T02:30:00+02:00",
    ]


def test_every_hour_job_skips_the_hour_that_does_not_exist():
    assert fires(crontab(minute="*/30"), "2024-03-31T01:00:00+01:00", 3) == [
        "2024-03-31T01:30:00+01:00",
        "2024-03-31T03:00:00+02:00",
        "2024-03-31T03:30:00+02:00",
    ]


def test_every_hour_job_runs_in_both_copies_of_the_repeated_hour():
    # 2024-10-27: Berlin goes back from 03:00 CEST to 02:00 CET; 02:00-02:59 happens twice
    assert fires(crontab(minute="*/30"), "2024-10-27T01:45:00+02:00", 5) == [
        "2024-10-27T02:00:00+02:00",
        "2024-10-27T02:30:00+02:00",
        "2024-10-27T02:00:00+01:00",
        "2024-10-27T02:30:00+01:00",
        "2024-10-27T03:00:00+01:00",
    ]


def test_daily_job_in_the_repeated_hour_runs_once():
    assert fires(crontab(minute=30, hour=2), "2024-10-26T12:00:00+02:00", 2) == [
        "2024-10-27T02:30:00+02:00",
        "2024-10-28T02:30:00+01:00",
    ]


def test_daily_local_time_stays_at_the_wall_clock_across_dst():
    assert fires(crontab(minute=0, hour=9), "2024-03-30T10:00:00+01:00", 2) == [
        "2024-03-31T09:00:00+02:00",
        "2024-04-01T09:00:00+02:00",
    ]


def test_interval_schedule_fires_on_the_epoch_grid():
    every = schedule(run_every=15)
    assert every.next_fire_after(1_000_007.0) == 1_000_020.0
    assert every.next_fire_after(1_000_020.0) == 1_000_035.0
    assert schedule(dt.timedelta(minutes=1)).next_fire_after(59.9) == 60.0
    assert schedule(0.25).next_fire_after(10.1) == 10.25


def test_maybe_schedule_accepts_what_beat_schedule_accepts():
    assert maybe_schedule(30) == schedule(30)
    assert maybe_schedule(dt.timedelta(seconds=5)) == schedule(5)
    cron = crontab(minute=1)
    assert maybe_schedule(cron) is cron
    with pytest.raises(TypeError, match="beat schedule"):
        maybe_schedule("every minute")
    with pytest.raises(ValueError, match="positive"):
        schedule(0)
