"""``potatoq limits``: cluster-wide concurrency limits, their usage, and changing them at
run time (``potatoq limits set KEY N``, ``potatoq limits clear KEY``) without a deploy."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from potatoq.brokers.limits import LimitUsage

from .output import Cell, Style, table
from .session import CliError, Exit, Registrar, Session, guarded

__all__ = ["limits_json", "limits_table", "register"]


def limits_json(usage: Sequence[LimitUsage]) -> list[dict[str, Any]]:
    return [
        {"key": u.key, "limit": u.limit, "running": u.running, "waiting": u.waiting, "override": u.override}
        for u in usage
    ]


def limits_table(usage: Sequence[LimitUsage], style: Style) -> str:
    body: list[list[Cell]] = []
    for u in usage:
        full = u.limit is not None and u.running >= u.limit
        body.append(
            [
                u.key,
                "-" if u.limit is None else str(u.limit) + (" (set)" if u.override else ""),
                (str(u.running), "yellow") if full else str(u.running),
                str(u.waiting),
            ]
        )
    return table(["KEY", "LIMIT", "RUNNING", "WAITING"], body, style, right=(1, 2, 3))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", nargs="?", default="show", choices=("show", "set", "clear"), help="default: show"
    )
    parser.add_argument("key", nargs="?", help="the limit key: a task name, name[key] or queue:NAME")
    parser.add_argument("limit", nargs="?", help="set: how many may run at once, cluster-wide")
    parser.add_argument("-j", "--json", action="store_true", help="print JSON for scripts")


def _positive(text: str | None) -> int:
    try:
        value = int(text or "")
    except ValueError:
        value = 0
    if value < 1:
        raise CliError(f"limit must be a positive whole number, got {text!r}", Exit.USAGE)
    return value


def cmd_limits(session: Session) -> int:
    """Show concurrency limits with their usage, or set/clear a run-time override."""
    args, broker = session.args, session.broker
    if not broker.capabilities.concurrency_limits:
        raise CliError(f"{type(broker).__name__} doesn't enforce concurrency limits", Exit.ERROR)
    if args.action in ("set", "clear"):
        if not args.key:
            raise CliError(f"limits {args.action} needs a KEY (see potatoq limits)", Exit.USAGE)
        limit = _positive(args.limit) if args.action == "set" else None
        broker.set_limit(args.key, limit)
        session.print(f"{args.key}: " + (f"at most {limit} running" if limit else "override cleared"))
        return Exit.OK
    usage = broker.limits()
    if args.json:
        session.json(limits_json(usage))
    elif usage:
        session.print(limits_table(usage, session.style))
    else:
        session.print("no concurrency limit in use")
    return Exit.OK


def register(command: Registrar) -> None:
    command(
        "limits",
        "concurrency limits: usage, and set/clear a limit at run time",
        arguments=_arguments,
    )(guarded(cmd_limits))
