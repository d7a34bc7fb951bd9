"""Periodic schedules: ``crontab`` and ``schedule`` (an interval), with Celery's names.

Both answer one question, :meth:`next_fire_after`: the first fire time strictly after a
timestamp. Every worker runs the scheduler and asks the broker to claim each fire time, so
fire times must be the same on every worker, computed from the clock alone (never from
"when this process last ran it"):

* ``schedule(run_every=N)`` fires on the grid of multiples of ``N`` seconds since the Unix
  epoch (``every 60 s`` fires at each whole UTC minute);
* ``crontab(...)`` fires at matching wall-clock minutes in the app's ``timezone``.

Daylight saving time, as classic cron does it: a wall time that is skipped (spring forward,
02:30 in Europe/Berlin on the last Sunday of March) fires once, shifted forward by the gap,
when the hour field names fixed hours, and not at all when the hour is ``*`` (that hour just
doesn't exist). A wall time that happens twice (fall back) fires at both instants when the
hour is ``*`` (an every-15-minutes job keeps its rhythm), and only at the first one when the
hour field names fixed hours (a daily job runs once).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Iterator
from typing import Any
from zoneinfo import ZoneInfo

__all__ = ["ParseError", "crontab", "crontab_parser", "maybe_schedule", "schedule"]

UTC = ZoneInfo("UTC")

DAY_NAMES = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1
    )
}

# How far back (and past the first match) to look so that a fall-back repeat, which makes
# wall-clock order differ from real-time order, can't hide an earlier instant. Real zones
# shift by at most two hours at once.
_DST_SLACK = dt.timedelta(hours=3)
# A crontab that matches no date within this many years never fires (e.g. 30 February).
_SEARCH_YEARS = 12


class ParseError(ValueError):
    """A crontab field can't be parsed; the message names the field and the bad part."""


class crontab_parser:
    """Parse one crontab field (``'*'``, ``'*/15'``, ``'1-5'``, ``'mon-fri'``, ``'1,3,5'``,
    ``'1-30/2'``) into the set of values it matches, within ``[min_, max_]``."""

    def __init__(
        self, max_: int, min_: int = 0, names: dict[str, int] | None = None, field: str = ""
    ) -> None:
        self.max_ = max_
        self.min_ = min_
        self.names = names or {}
        self.field = field or "field"

    def parse(self, spec: str) -> set[int]:
        values: set[int] = set()
        for part in spec.replace(" ", "").lower().split(","):
            if not part:
                raise ParseError(f"crontab {self.field}: empty item in {spec!r}")
            values |= self._part(part, spec)
        return values

    def _part(self, part: str, spec: str) -> set[int]:
        step = 1
        if "/" in part:
            part, _, step_text = part.partition("/")
            step = self._number(step_text, spec, allow_names=False)
            if step < 1:
                raise ParseError(f"crontab {self.field}: step must be at least 1 in {spec!r}")
            if "-" not in part and part != "*":  # '5/15' means '5-max/15', as in cron
                part = f"{part}-{self.max_}"
        if part == "*":
            low, high = self.min_, self.max_
        elif "-" in part:
            low_text, _, high_text = part.partition("-")
            low, high = self._number(low_text, spec), self._number(high_text, spec)
        else:
            low = high = self._number(part, spec)
        for value in (low, high):
            if not self.min_ <= value <= self.max_:
                raise ParseError(
                    f"crontab {self.field}: {value} is out of range {self.min_}-{self.max_} in {spec!r}"
                )
        if low > high:  # a wrapping range such as 'fri-mon' or '22-2'
            return set(range(low, self.max_ + 1, step)) | set(range(self.min_, high + 1, step))
        return set(range(low, high + 1, step))

    def _number(self, text: str, spec: str, *, allow_names: bool = True) -> int:
        if allow_names and text in self.names:
            return self.names[text]
        if allow_names and text.isalpha() and text[:3] in self.names:  # 'sunday', 'march' (Celery)
            return self.names[text[:3]]
        try:
            return int(text)
        except ValueError:
            raise ParseError(f"crontab {self.field}: can't read {text!r} in {spec!r}") from None


class BaseSchedule:
    """What the scheduler needs from a schedule."""

    def next_fire_after(self, ts: float, tz: dt.tzinfo | None = None) -> float:
        """The first fire time (epoch seconds) strictly after ``ts``, in timezone ``tz``."""
        raise NotImplementedError

    def fire_times(self, start: float, tz: dt.tzinfo | None = None) -> Iterator[float]:
        """Fire times strictly after ``start``, in order, forever."""
        ts = start
        while True:
            ts = self.next_fire_after(ts, tz)
            yield ts


class schedule(BaseSchedule):
    """Every ``run_every`` (seconds or a ``timedelta``), on the epoch-aligned grid.

    ``relative`` is accepted for Celery compatibility and ignored: fire times are aligned so
    that every worker computes the same ones.
    """

    def __init__(self, run_every: float | dt.timedelta, relative: bool = False, **_: Any) -> None:
        seconds = run_every.total_seconds() if isinstance(run_every, dt.timedelta) else float(run_every)
        if not math.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"schedule run_every must be a positive number of seconds, got {run_every!r}")
        self.run_every = dt.timedelta(seconds=seconds)
        self.seconds = seconds
        self.relative = relative

    def next_fire_after(self, ts: float, tz: dt.tzinfo | None = None) -> float:
        step = self.seconds
        candidate = math.floor(ts / step) * step + step
        # Float rounding can land on ts itself for non-integral steps; move one step on.
        while candidate <= ts:
            candidate += step
        return round(candidate, 6)

    def __repr__(self) -> str:
        return f"<schedule: every {self.seconds:g}s>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, schedule) and other.seconds == self.seconds

    def __hash__(self) -> int:
        return hash(("schedule", self.seconds))


def _field(value: Any, parser: crontab_parser) -> set[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return parser.parse(str(value))
    if isinstance(value, str):
        return parser.parse(value)
    if isinstance(value, Iterable):
        found: set[int] = set()
        for item in value:
            found |= _field(item, parser)
        return found
    raise ParseError(f"crontab {parser.field}: expected a string, int or list, got {value!r}")


class crontab(BaseSchedule):
    """Celery's ``crontab(minute, hour, day_of_week, day_of_month, month_of_year)``.

    ``day_of_week``: 0 or ``sun`` is Sunday … 6 or ``sat`` (7 also means Sunday). As in
    Celery, every field must match (``day_of_week`` and ``day_of_month`` are AND-ed).
    """

    def __init__(
        self,
        minute: Any = "*",
        hour: Any = "*",
        day_of_week: Any = "*",
        day_of_month: Any = "*",
        month_of_year: Any = "*",
        **_: Any,
    ) -> None:
        self._orig = (minute, hour, day_of_week, day_of_month, month_of_year)
        self.minute = _field(minute, crontab_parser(59, field="minute"))
        self.hour = _field(hour, crontab_parser(23, field="hour"))
        dow = _field(day_of_week, crontab_parser(7, names=DAY_NAMES, field="day_of_week"))
        self.day_of_week = {d % 7 for d in dow}
        self.day_of_month = _field(day_of_month, crontab_parser(31, 1, field="day_of_month"))
        self.month_of_year = _field(
            month_of_year, crontab_parser(12, 1, names=MONTH_NAMES, field="month_of_year")
        )
        self._minutes = sorted(self.minute)
        self._hours = sorted(self.hour)
        self._every_hour = len(self.hour) == 24

    # -- matching --------------------------------------------------------------------------

    def _day_matches(self, day: dt.date) -> bool:
        # date.weekday(): Monday = 0; cron: Sunday = 0
        return (
            day.month in self.month_of_year
            and day.day in self.day_of_month
            and (day.weekday() + 1) % 7 in self.day_of_week
        )

    def _wall_times(self, start: dt.datetime) -> Iterator[dt.datetime]:
        """Matching naive wall-clock times at or after ``start``, in wall-clock order."""
        day = start.date()
        last = day + dt.timedelta(days=366 * _SEARCH_YEARS)
        while day <= last:
            if day.month not in self.month_of_year:
                # jump to the first day of the next month
                day = (day.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
                continue
            if self._day_matches(day):
                for hour in self._hours:
                    for minute in self._minutes:
                        wall = dt.datetime(day.year, day.month, day.day, hour, minute)
                        if wall >= start:
                            yield wall
            day += dt.timedelta(days=1)

    def _instants(self, wall: dt.datetime, tz: dt.tzinfo) -> list[float]:
        """The real instants at which wall time ``wall`` fires (see the module docstring)."""
        first = wall.replace(tzinfo=tz, fold=0)
        second = wall.replace(tzinfo=tz, fold=1)
        t0, t1 = first.timestamp(), second.timestamp()
        exists = dt.datetime.fromtimestamp(t0, tz).replace(tzinfo=None) == wall
        if not exists:  # in a spring-forward gap; fold=0 maps it forward by the gap
            return [] if self._every_hour else [t0]
        if t0 != t1 and self._every_hour:  # repeated by a fall back
            return sorted((t0, t1))
        return [min(t0, t1)]

    def next_fire_after(self, ts: float, tz: dt.tzinfo | None = None) -> float:
        zone = tz or UTC
        # Start a little before ts in wall time: a fall back repeats wall times, so an
        # instant after ts can belong to a wall time earlier than ts's own.
        start = (dt.datetime.fromtimestamp(ts, zone).replace(tzinfo=None) - _DST_SLACK).replace(
            second=0, microsecond=0
        )
        best: float | None = None
        horizon: dt.datetime | None = None
        for wall in self._wall_times(start):
            if horizon is not None and wall > horizon:
                break
            for instant in self._instants(wall, zone):
                if instant > ts and (best is None or instant < best):
                    best = instant
                    horizon = wall + 2 * _DST_SLACK
        if best is None:
            raise ValueError(f"{self!r} never fires (no matching date within {_SEARCH_YEARS} years)")
        return best

    def __repr__(self) -> str:
        minute, hour, dow, dom, moy = (str(v) for v in self._orig)
        return f"<crontab: {minute} {hour} {dow} {dom} {moy} (m/h/dow/dom/moy)>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, crontab) and (
            self.minute,
            self.hour,
            self.day_of_week,
            self.day_of_month,
            self.month_of_year,
        ) == (other.minute, other.hour, other.day_of_week, other.day_of_month, other.month_of_year)

    def __hash__(self) -> int:
        return hash(
            (
                frozenset(self.minute),
                frozenset(self.hour),
                frozenset(self.day_of_week),
                frozenset(self.day_of_month),
                frozenset(self.month_of_year),
            )
        )


def maybe_schedule(value: Any) -> BaseSchedule:
    """A schedule from what ``beat_schedule`` accepts: seconds, a ``timedelta`` or a schedule."""
    if isinstance(value, BaseSchedule):
        return value
    if isinstance(value, int | float | dt.timedelta) and not isinstance(value, bool):
        return schedule(value)
    raise TypeError(f"a beat schedule must be seconds, a timedelta, schedule() or crontab(), got {value!r}")


def resolve_timezone(name: str | dt.tzinfo | None) -> dt.tzinfo:
    """``app.conf.timezone`` as a tzinfo: None means UTC."""
    if name is None or name == "":
        return UTC
    if isinstance(name, dt.tzinfo):
        return name
    return ZoneInfo(str(name))
