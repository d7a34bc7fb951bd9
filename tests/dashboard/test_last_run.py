"""The periodic page's last run in a real headless Chromium, on every broker: the real
scheduler sends a fire time and the page shows it on its next live refresh."""

from __future__ import annotations

import time
from typing import Any

from potatoq import Potatoq
from potatoq.dashboard import create_app
from potatoq.schedules import crontab
from potatoq.worker.scheduler import Scheduler
from tests.worker.conftest import wait_for

from .browser import browser, require_chromium, serve

TIMEOUT_MS = 20000  # an upper bound for a live refresh (every 3 s) on a loaded machine


def _utc(ts: float) -> str:
    """How the dashboard writes a moment (app._when)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def test_the_last_run_appears_once_the_scheduler_sent_it(any_app: Potatoq) -> None:
    require_chromium()
    app = any_app
    clock = [time.time()]
    # An entry that must stay unsent: once a day, 11 to 12 hours from now (UTC). Every
    # 86400 s would share tick's fire time when the test starts in the last 30 s of a day.
    far_hour = (time.gmtime(clock[0]).tm_hour + 12) % 24
    app.conf.beat_schedule = {
        "tick": {"task": "demo.add", "schedule": 30.0, "args": (1, 2)},
        "nightly": {"task": "demo.parent", "schedule": crontab(minute=0, hour=far_hour)},
    }
    scheduler = Scheduler(app, clock=lambda: clock[0])
    # RabbitMQ elects one scheduler through a token; the other brokers say yes at once.
    wait_for(scheduler.has_lease, what="the scheduler token")
    scheduler.tick()  # loads the entries: nothing is due yet
    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page: Any = chromium.new_page()
        page.goto(f"{url}/schedules")
        page.evaluate("window.__same_document = true")  # lost on a full reload
        assert page.inner_text('tr[data-entry="tick"] .last-run') == "none recorded"
        entry = next(e for e in scheduler.entries or () if e.name == "tick")
        fired = entry.next_fire
        clock[0] = fired + 0.5  # the scheduler's clock reaches the fire time: it sends it
        scheduler.tick()
        assert entry.sent == 1
        page.wait_for_function(
            """when => document.querySelector('tr[data-entry="tick"] .last-run')
                        .textContent.startsWith(when)""",
            arg=_utc(fired),
            timeout=TIMEOUT_MS,
        )
        assert page.evaluate("window.__same_document") is True
        assert page.inner_text('tr[data-entry="nightly"] .last-run') == "none recorded"
