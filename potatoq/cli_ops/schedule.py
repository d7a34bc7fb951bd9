"""``potatoq schedule``: the periodic tasks of ``beat_schedule``, when each last ran and
when it runs next.

Next fire times are computed the way the workers' scheduler computes them (in the app's
``timezone``, on the epoch grid for intervals), so what this prints is what will happen.
The last run is the newest fire time the scheduler recorded in the broker
(``Broker.last_fire_times``); when the broker can't be reached the rest is still printed.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from potatoq.schedules import BaseSchedule, crontab, resolve_timezone, schedule

from .argtypes import whole_number
from .output import Cell, duration, table, timestamp
from .session import CliError, Exit, Registrar, Session, guarded

__all__ = ["describe_schedule", "register"]


def describe_schedule(value: BaseSchedule) -> str:
    """``every 30s`` / ``cron 0 3 * * *`` (minute hour day-of-week day-of-month month)."""
    if isinstance(value, schedule):
        return f"every {value.seconds:g}s"
    if isinstance(value, crontab):
        text = repr(value)
        inner = text.removeprefix("<crontab: ").removesuffix(" (m/h/dow/dom/moy)>")
        return f"cron {inner}" if inner != text else text
    return repr(value)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n",
        "--runs",
        type=whole_number(1, 100),
        default=1,
        metavar="N",
        help="show the next N runs of each (default 1)",
    )
    parser.add_argument("-j", "--json", action="store_true", help="print JSON for scripts")


def _last_runs(session: Session, names: list[str]) -> dict[str, float] | None:
    """The broker's last fire time per entry, or None (with a note) when it can't be read:
    the next runs are computed locally and are worth printing anyway."""
    if not names:
        return {}
    try:
        return session.broker.last_fire_times(names)
    except session.connection_errors() as exc:
        session.note(f"last runs unknown: {session.unreachable(exc)}")
        return None


def cmd_schedule(session: Session) -> int:
    """List beat_schedule entries with their last and next run times."""
    from potatoq.worker.scheduler import load_entries

    app = session.app
    app.finalize()  # on_after_configure handlers often add periodic tasks
    try:
        tz = resolve_timezone(app.conf.timezone)
        entries = load_entries(app)
    except (ValueError, TypeError, LookupError) as exc:
        raise CliError(f"bad beat_schedule or timezone: {exc}", Exit.USAGE) from None
    last_runs = _last_runs(session, [entry.name for entry in entries])
    now = time.time()
    table_rows: list[list[Cell]] = []
    found: list[dict[str, Any]] = []
    for entry in sorted(entries, key=lambda e: e.name):
        runs: list[float] = []
        at = now
        try:
            for _ in range(session.args.runs):
                at = entry.schedule.next_fire_after(at, tz)
                runs.append(at)
        except ValueError as exc:  # a crontab that never matches, e.g. 30 February
            raise CliError(f"beat_schedule[{entry.name!r}]: {exc}", Exit.USAGE) from None
        last = None if last_runs is None else last_runs.get(entry.name)
        last_cell = "?" if last_runs is None else timestamp(last, tz)  # "-": none on record
        found.append(
            {
                "name": entry.name,
                "task": entry.task,
                "schedule": describe_schedule(entry.schedule),
                "args": list(entry.args),
                "kwargs": dict(entry.kwargs),
                "options": dict(entry.options),
                "last_run": last,
                "next_run": runs[0],
                "next_runs": [timestamp(t, tz) for t in runs],
            }
        )
        table_rows.append(
            [
                entry.name,
                entry.task,
                describe_schedule(entry.schedule),
                last_cell,
                ", ".join(timestamp(t, tz) for t in runs),
                (f"in {duration(runs[0] - now)}", "cyan"),
            ]
        )
    if session.args.json:
        session.json({"timezone": str(tz), "entries": found})
    elif found:
        headers = ["NAME", "TASK", "SCHEDULE", "LAST RUN", "NEXT RUN", "IN"]
        session.print(table(headers, table_rows, session.style))
    else:
        session.print("no periodic tasks (beat_schedule is empty)")
    return Exit.OK


def register(command: Registrar) -> None:
    command("schedule", "periodic tasks (beat_schedule): last and next run", arguments=_arguments)(
        guarded(cmd_schedule)
    )
