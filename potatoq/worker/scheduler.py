"""The periodic scheduler: every worker runs it, the broker makes each fire time happen once.

For each ``app.conf.beat_schedule`` entry the scheduler computes fire times (in
``app.conf.timezone``, see ``potatoq.schedules``) and, when one is due, calls
``broker.claim_fire_time(name, fire_time, message)``. That call is true for exactly one
caller per ``(name, fire_time)``, and that caller's message is the one enqueued, so any
number of workers (and ``potatoq beat`` processes) send each run once. Fire times live in
the broker, not in a local schedule file.

* A new entry first fires at its next fire time after start, never "at once": a crontab
  for 03:00 started at 10:00 runs tomorrow at 03:00. An entry with a last fire time on
  record resumes from it: fire times missed meanwhile (no worker ran) are handled by the
  entry's misfire policy (see :mod:`.misfire`; by default one catch-up run, as Celery).
* Each message expires at the entry's next fire time: a run that couldn't start before the
  next one is due is dropped instead of piling up behind a slow or absent worker.
* If the scheduler itself falls behind (a stalled process), the misfire policy decides
  too: by default only the latest due fire time is sent. Catch-up runs expire at the next
  fire time after now, like the on-time run.
* A broker that elects one scheduler (RabbitMQ's ``scheduler_lease()``) gets asked before
  each round; the others skip the round.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from potatoq import signals
from potatoq.schedules import BaseSchedule, maybe_schedule, resolve_timezone

from .misfire import Misfire, parse_misfire
from .settling import connection_errors

__all__ = ["Entry", "Scheduler", "load_entries", "run_beat"]

logger = logging.getLogger("potatoq.worker.beat")

IDLE_RECHECK = 1.0  # with no entries, or without the scheduler lease: look again this often


@dataclasses.dataclass
class Entry:
    name: str
    task: str
    schedule: BaseSchedule
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    misfire: Misfire = dataclasses.field(default_factory=Misfire)
    next_fire: float = 0.0
    sent: int = 0


def load_entries(app: Any) -> list[Entry]:
    """The app's ``beat_schedule`` as entries; a clear error for a malformed one."""
    entries = []
    for name, spec in dict(app.conf.beat_schedule or {}).items():
        if not isinstance(spec, Mapping) or "task" not in spec or "schedule" not in spec:
            raise ValueError(f"beat_schedule[{name!r}] needs 'task' and 'schedule' keys, got {spec!r:.200}")
        entries.append(
            Entry(
                name=str(name),
                task=str(spec["task"]),
                schedule=maybe_schedule(spec["schedule"]),
                args=tuple(spec.get("args") or ()),
                kwargs=dict(spec.get("kwargs") or {}),
                options=dict(spec.get("options") or {}),
                misfire=parse_misfire(str(name), spec),
            )
        )
    return entries


class Scheduler:
    """Sends due periodic tasks through ``claim_fire_time``; call :meth:`tick` repeatedly."""

    def __init__(self, app: Any, *, clock: Callable[[], float] = time.time) -> None:
        self.app = app
        self.clock = clock
        self.entries: list[Entry] | None = None  # loaded at the first tick, after app setup
        self.tz: dt.tzinfo = resolve_timezone(getattr(app.conf, "timezone", None))
        self.max_interval = float(getattr(app.conf, "beat_max_loop_interval", 0) or 0) or 60.0
        self.leading = False  # sending (holds the lease, where the broker elects one)

    def _load(self, now: float) -> list[Entry]:
        entries = load_entries(self.app)
        for entry in entries:
            entry.next_fire = entry.schedule.next_fire_after(now, self.tz)
        if entries:
            logger.info(
                "periodic scheduler: %s",
                ", ".join(f"{e.name} ({e.task}, {e.schedule!r})" for e in entries),
            )
        return entries

    def _resume_from_record(self, entries: list[Entry]) -> None:
        """Continue each entry after its last fire time on record in the broker, whoever sent
        it: fire times missed since (no scheduler ran) are then due, for the misfire policy.
        An entry with none on record keeps its next fire time after start."""
        last = self._last_fire_times([e.name for e in entries])
        for entry in entries:
            if entry.name in last:
                entry.next_fire = entry.schedule.next_fire_after(last[entry.name], self.tz)

    def _last_fire_times(self, names: list[str]) -> dict[str, float]:
        if not names:
            return {}
        try:
            last: dict[str, float] = self.app.broker.last_fire_times(names)
        except connection_errors(self.app.broker):
            raise  # the caller retries the first tick
        except Exception:
            logger.exception("periodic scheduler: can't read the last fire times; starting from now")
            return {}
        return last

    def has_lease(self) -> bool:
        lease = getattr(self.app.broker, "scheduler_lease", None)
        return True if lease is None else bool(lease())

    def tick(self) -> float:
        """Send every due fire time; return seconds until the next one (or the next check)."""
        now = self.clock()
        if self.entries is None:
            self.entries = self._load(now)
        if not self.entries:
            return self.max_interval
        if not self.has_lease():
            # Not the elected scheduler: keep fire times current (and read the record
            # again on taking over).
            self.leading = False
            for entry in self.entries:
                self._skip_to(entry, now)
            return IDLE_RECHECK
        if not self.leading:
            self._resume_from_record(self.entries)
            self.leading = True
        for entry in self.entries:
            if entry.next_fire <= now:
                self._fire(entry, now)
        wait = min(e.next_fire for e in self.entries) - self.clock()
        return max(0.0, min(wait, self.max_interval))

    def _due(self, entry: Entry, now: float) -> tuple[list[float], float]:
        """The newest due fire times (oldest first, as many as the misfire policy needs) and
        the first fire time after ``now``; leaves ``entry.next_fire`` at the newest due one."""
        due = [entry.next_fire]
        following = entry.schedule.next_fire_after(entry.next_fire, self.tz)
        while following <= now:
            due.append(following)
            if len(due) > entry.misfire.keeps:
                del due[0]
            following = entry.schedule.next_fire_after(following, self.tz)
        entry.next_fire = due[-1]
        return due, following

    def _skip_to(self, entry: Entry, now: float) -> float:
        """Advance past fire times overtaken by ``now``; return the first one after it."""
        return self._due(entry, now)[1]

    def _fire(self, entry: Entry, now: float) -> None:
        due, following = self._due(entry, now)
        to_send = entry.misfire.to_send(due, now)
        if len(due) > 1 or len(to_send) < len(due):
            logger.info(
                "periodic %s: late by %.0fs; misfire policy %s sends %d run(s)",
                entry.name,
                now - due[0],
                entry.misfire.policy,
                len(to_send),
            )
        for fire in to_send:  # a connection error leaves next_fire due: the next tick retries
            self._send(entry, fire, following)
        entry.next_fire = following

    def _send(self, entry: Entry, fire: float, following: float) -> None:
        message = self.app.make_message(
            entry.task, args=entry.args, kwargs=dict(entry.kwargs), **entry.options
        )
        expires = following if message.expires is None else min(message.expires, following)
        message = message.replace(expires=expires)
        try:
            won = self.app.broker.claim_fire_time(entry.name, fire, message)
        except connection_errors(self.app.broker):
            raise  # the caller logs it; this fire time is tried again next tick (until overtaken)
        except Exception:
            logger.exception("periodic %s: sending fire time %s failed", entry.name, _when(fire, self.tz))
            won = False
        if won:
            entry.sent += 1
            logger.info(
                "periodic %s: sent %s[%s] for %s", entry.name, entry.task, message.id, _when(fire, self.tz)
            )
        else:
            logger.debug("periodic %s: %s already sent by another worker", entry.name, _when(fire, self.tz))


def _when(ts: float, tz: dt.tzinfo) -> str:
    return dt.datetime.fromtimestamp(ts, tz).isoformat(timespec="seconds")


def run_beat(app: Any, *, stop: threading.Event | None = None) -> int:
    """``potatoq beat``: run only the scheduler until SIGTERM/SIGINT."""
    stop = stop or threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    signals.beat_init.send(sender=app)
    scheduler = Scheduler(app)
    logger.info("beat: scheduler started (timezone %s)", scheduler.tz)
    while not stop.is_set():
        try:
            delay = scheduler.tick()
        except connection_errors(app.broker) as exc:
            logger.warning("beat: the broker is unreachable: %r; retrying in 1s", exc)
            delay = 1.0
        stop.wait(delay)
    logger.info("beat: stopped")
    return 0
