"""The scheduler against a real SQLite broker, with an injected clock."""

from __future__ import annotations

import datetime as dt

import pytest

from potatoq import Potatoq
from potatoq.schedules import crontab
from potatoq.worker.scheduler import Scheduler, load_entries


@pytest.fixture
def app(tmp_path):
    app = Potatoq("sched", broker=f"sqlite:///{tmp_path / 'b.sqlite3'}", set_as_current=False)

    @app.task(name="sched.ping")
    def ping() -> str:
        return "pong"

    yield app
    app.close()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _ready(app) -> int:
    return sum(s.waiting for s in app.broker.queue_stats())


def test_many_schedulers_send_each_fire_time_once(app):
    app.conf.beat_schedule = {"ping": {"task": "sched.ping", "schedule": 10.0}}
    clock = Clock(1_000_003.0)
    schedulers = [Scheduler(app, clock=clock) for _ in range(3)]
    for s in schedulers:
        assert 0 < s.tick() <= 7.0
        assert s.entries is not None
        assert s.entries[0].next_fire == 1_000_010.0  # the next grid point, not now
    assert _ready(app) == 0
    for now in (1_000_010.0, 1_000_010.5, 1_000_020.0):
        clock.now = now
        for s in schedulers:
            s.tick()
    assert _ready(app) == 2
    assert sum(e.sent for s in schedulers for e in s.entries or ()) == 2


def test_message_expires_at_the_next_fire_time(app):
    app.conf.beat_schedule = {"ping": {"task": "sched.ping", "schedule": 60, "options": {"queue": "beat"}}}
    clock = Clock(1_000_000.0)
    scheduler = Scheduler(app, clock=clock)
    scheduler.tick()
    clock.now = 1_000_020.0 + 0.2
    scheduler.tick()
    delivery = app.broker.claim(["beat"], _ref())
    assert delivery is not None and delivery.message is not None
    assert delivery.message.task == "sched.ping"
    assert delivery.message.expires == 1_000_080.0


def test_a_stalled_scheduler_sends_only_the_latest_fire_time(app):
    app.conf.beat_schedule = {"ping": {"task": "sched.ping", "schedule": 1.0}}
    clock = Clock(1_000_000.5)
    scheduler = Scheduler(app, clock=clock)
    scheduler.tick()
    clock.now = 1_000_010.7  # ten fire times overtaken at once
    scheduler.tick()
    assert _ready(app) == 1
    delivery = app.broker.claim(["default"], _ref())
    assert delivery is not None and delivery.message is not None
    assert delivery.message.expires == 1_000_011.0


def test_crontab_entry_first_fires_on_its_next_boundary(app):
    app.conf.timezone = "Europe/Berlin"
    app.conf.beat_schedule = {"nightly": {"task": "sched.ping", "schedule": crontab(minute=0, hour=3)}}
    berlin = dt.datetime(2024, 6, 1, 10, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    clock = Clock(berlin.timestamp())
    scheduler = Scheduler(app, clock=clock)
    wait = scheduler.tick()
    assert 0 < wait <= float(app.conf.beat_max_loop_interval)
    assert _ready(app) == 0
    assert scheduler.entries is not None
    assert scheduler.entries[0].next_fire == dt.datetime(2024, 6, 2, 1, 0, tzinfo=dt.UTC).timestamp()


def test_scheduler_lease_gates_sending(app):
    app.conf.beat_schedule = {"ping": {"task": "sched.ping", "schedule": 1.0}}
    clock = Clock(1_000_000.5)
    scheduler = Scheduler(app, clock=clock)
    leader = {"value": False}
    app.broker.scheduler_lease = lambda: leader["value"]  # what RabbitMQ's broker provides
    scheduler.tick()
    clock.now = 1_000_003.2
    scheduler.tick()
    assert _ready(app) == 0
    leader["value"] = True
    clock.now = 1_000_004.1
    scheduler.tick()
    assert _ready(app) == 1  # only the current fire time, no backlog from the follower days


def test_malformed_beat_schedule_names_the_entry(app):
    app.conf.beat_schedule = {"broken": {"schedule": 5}}
    with pytest.raises(ValueError, match="broken"):
        load_entries(app)


def _ref():
    from potatoq.brokers.base import WorkerRef

    return WorkerRef("test", 1)
