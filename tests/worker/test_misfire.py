"""Periodic misfire policies on every broker of ``tests/factories``: what a scheduler that
starts after an outage (the last fire time on record is old) or that stalled sends, with
any number of schedulers racing. Clocks are injected; fire times are near the real time so
the messages sent aren't expired."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from potatoq import Potatoq
from potatoq.brokers import broker_class
from potatoq.worker.scheduler import Scheduler, load_entries
from tests import services
from tests.conftest import FACTORIES, FactoryContext

EVERY = 10.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=list(FACTORIES))
def make_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """``make_app(**entry keys)``: apps on one isolated broker of each kind, with one entry
    ``ping`` every 10 s; several apps made by one test share the broker (a fleet)."""
    module = FACTORIES[request.param]
    if getattr(module, "SERVICE", None):
        services.require(module.SERVICE)
    ctx = FactoryContext(tmp_path=tmp_path, unique=f"m{uuid.uuid4().hex[:10]}", overrides={})
    config = module.make_config(ctx)
    made: list[Potatoq] = []
    memory_url = f"memory://misfire-{uuid.uuid4().hex[:8]}"

    def make(**keys: Any) -> Potatoq:
        url = memory_url if config.url.startswith("memory") else config.url
        backend = config.result_backend.config.url if config.result_backend is not None else None
        if backend is None and not broker_class(url).capabilities.results_by_default:
            backend = None
        app = Potatoq(
            "misfire",
            broker=url,
            result_backend=backend,
            broker_transport_options=dict(config.transport_options),
            set_as_current=False,
        )
        app.conf.beat_schedule = {"ping": {"task": "misfire.ping", "schedule": EVERY, **keys}}
        made.append(app)
        return app

    yield make
    for app in made:
        app.close()
    for fn in reversed(ctx.finalizers):
        fn()


def grid_now() -> float:
    """A moment 3 s after a multiple of EVERY, near the real time."""
    return (time.time() // EVERY) * EVERY + 3.0


def sent(*schedulers: Scheduler) -> int:
    return sum(e.sent for s in schedulers for e in s.entries or ())


def last_run(app: Potatoq) -> float | None:
    return app.broker.last_fire_times(["ping"]).get("ping")


def elected(scheduler: Scheduler) -> Scheduler:
    """``scheduler`` once it may send (RabbitMQ elects one scheduler per broker connection)."""
    deadline = time.monotonic() + 30
    while not scheduler.has_lease():
        assert time.monotonic() < deadline, "the scheduler never got the lease"
        time.sleep(0.05)
    return scheduler


def run_before_an_outage(app: Potatoq, start: float) -> float:
    """A scheduler that sends one fire time and stops; returns that fire time."""
    clock = Clock(start)
    first = elected(Scheduler(app, clock=clock))
    first.tick()
    clock.now = start + EVERY - 2.5  # half a second after the next fire time: on time
    first.tick()
    assert sent(first) == 1
    fired = last_run(app)
    assert fired is not None
    return fired


def test_by_default_one_run_makes_up_for_the_fire_times_missed_while_down(make_app: Any) -> None:
    app = make_app()
    start = grid_now() - 100 * EVERY
    fired = run_before_an_outage(app, start)
    now = fired + 5 * EVERY + 3  # five fire times passed with no scheduler running
    restarted = elected(Scheduler(app, clock=Clock(now)))
    restarted.tick()
    assert sent(restarted) == 1  # one run, as Celery beat after a restart
    assert last_run(app) == fired + 5 * EVERY  # sent as the newest missed fire time
    assert restarted.entries is not None and restarted.entries[0].next_fire == fired + 6 * EVERY


def test_skip_sends_nothing_for_missed_fire_times(make_app: Any) -> None:
    app = make_app(misfire="skip", misfire_grace=1.0)
    fired = run_before_an_outage(app, grid_now() - 100 * EVERY)
    clock = Clock(fired + 5 * EVERY + 3)
    restarted = elected(Scheduler(app, clock=clock))
    restarted.tick()
    assert sent(restarted) == 0 and last_run(app) == fired
    clock.now = fired + 6 * EVERY + 0.5  # the next one, on time
    restarted.tick()
    assert sent(restarted) == 1 and last_run(app) == fired + 6 * EVERY


def test_a_fire_time_within_the_grace_is_on_time_even_with_skip(make_app: Any) -> None:
    app = make_app(misfire="skip", misfire_grace=5.0)
    fired = run_before_an_outage(app, grid_now() - 100 * EVERY)
    restarted = elected(Scheduler(app, clock=Clock(fired + 3 * EVERY + 4)))  # 4 s late: within 5 s
    restarted.tick()
    assert sent(restarted) == 1 and last_run(app) == fired + 3 * EVERY


def test_catch_up_sends_each_missed_fire_time_up_to_its_limit(make_app: Any) -> None:
    app = make_app(misfire="catch_up", catch_up_limit=3)
    fired = run_before_an_outage(app, grid_now() - 10 * EVERY)
    now = fired + 5 * EVERY + 3
    restarted = elected(Scheduler(app, clock=Clock(now)))
    restarted.tick()
    assert sent(restarted) == 3  # the newest three of five
    assert last_run(app) == fired + 5 * EVERY


def test_a_stalled_scheduler_applies_the_policy_too(make_app: Any) -> None:
    app = make_app(misfire="catch_up", catch_up_limit=4)
    clock = Clock(grid_now() - 20 * EVERY)
    scheduler = elected(Scheduler(app, clock=clock))
    scheduler.tick()
    clock.now += 6 * EVERY  # six fire times overtaken at once
    scheduler.tick()
    assert sent(scheduler) == 4


@pytest.mark.parametrize(("keys", "runs"), [({}, 1), ({"misfire": "catch_up", "catch_up_limit": 4}, 4)])
def test_racing_schedulers_after_an_outage_send_each_run_once(
    make_app: Any, keys: dict[str, Any], runs: int
) -> None:
    fleet = [make_app(**keys) for _ in range(4)]  # four workers' apps on one broker
    fired = run_before_an_outage(fleet[0], grid_now() - 50 * EVERY)
    now = fired + 7 * EVERY + 3
    schedulers = [Scheduler(app, clock=Clock(now)) for app in fleet]
    gate = threading.Barrier(len(schedulers))

    def start(scheduler: Scheduler) -> None:
        gate.wait()
        scheduler.tick()

    threads = [threading.Thread(target=start, args=(s,)) for s in schedulers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sent(*schedulers) == runs
    assert last_run(fleet[0]) == fired + 7 * EVERY


@pytest.mark.parametrize(
    ("keys", "complaint"),
    [
        ({"misfire": "later"}, "['misfire'] must be one of run_once, skip, catch_up"),
        ({"misfire_grace": -1}, "['misfire_grace'] must be a number of seconds >= 0"),
        ({"misfire_grace": "soon"}, "['misfire_grace'] must be a number of seconds >= 0"),
        ({"catch_up_limit": 0}, "['catch_up_limit'] must be a whole number >= 1"),
        ({"catch_up_limit": 2.5}, "['catch_up_limit'] must be a whole number >= 1"),
    ],
)
def test_bad_misfire_keys_are_refused_naming_the_entry(keys: dict[str, Any], complaint: str) -> None:
    app = Potatoq("bad", broker="memory://misfire-bad", set_as_current=False)
    app.conf.beat_schedule = {"ping": {"task": "misfire.ping", "schedule": EVERY, **keys}}
    with pytest.raises(ValueError, match="beat_schedule") as info:
        load_entries(app)
    assert "beat_schedule['ping']" in str(info.value) and complaint in str(info.value)
