"""``potatoq limits``: cluster-wide concurrency and rate limits, their usage, and changing
them at run time without a deploy: ``potatoq limits set KEY N`` (at most N running),
``potatoq limits set KEY 100/s [--burst B]`` (a rate), ``potatoq limits clear KEY``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from potatoq.brokers.limits import LimitUsage, RateUsage, format_rate, parse_rate

from .output import Cell, Style, table
from .session import CliError, Exit, Registrar, Session, guarded

__all__ = ["format_rate", "limits_json", "limits_table", "rates_json", "rates_table", "register"]


def limits_json(usage: Sequence[LimitUsage]) -> list[dict[str, Any]]:
    return [
        {"key": u.key, "limit": u.limit, "running": u.running, "waiting": u.waiting, "override": u.override}
        for u in usage
    ]


def rates_json(usage: Sequence[RateUsage]) -> list[dict[str, Any]]:
    return [
        {
            "key": u.key,
            "rate": u.rate,
            "burst": u.burst,
            "tokens": round(u.tokens, 3),
            "waiting": u.waiting,
            "override": u.override,
        }
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


def rates_table(usage: Sequence[RateUsage], style: Style) -> str:
    body: list[list[Cell]] = []
    for u in usage:
        tokens = f"{u.tokens:.1f}"
        body.append(
            [
                u.key,
                format_rate(u.rate) + (" (set)" if u.override else ""),
                "-" if u.burst is None else str(u.burst),
                (tokens, "yellow") if u.tokens < 1 else tokens,
                str(u.waiting),
            ]
        )
    return table(["KEY", "RATE", "BURST", "TOKENS", "WAITING"], body, style, right=(1, 2, 3, 4))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", nargs="?", default="show", choices=("show", "set", "clear"), help="default: show"
    )
    parser.add_argument("key", nargs="?", help="the limit key: a task name, name[key] or queue:NAME")
    parser.add_argument(
        "limit", nargs="?", help="set: N (at most N running, cluster-wide) or a rate: 100/s, 20/m, 500/h"
    )
    parser.add_argument("--burst", type=int, default=None, help="set RATE: how many may start at once")
    parser.add_argument("-j", "--json", action="store_true", help="print JSON for scripts")


def _positive(text: str | None) -> int:
    try:
        value = int(text or "")
    except ValueError:
        value = 0
    if value < 1:
        raise CliError(
            f"limit must be a positive whole number or a rate like 100/s, got {text!r}", Exit.USAGE
        )
    return value


def _set(session: Session, key: str, text: str | None) -> None:
    broker = session.broker
    if text is not None and "/" in text:
        if not broker.capabilities.rate_limits:
            raise CliError(f"{type(broker).__name__} doesn't enforce global rate limits", Exit.ERROR)
        try:
            per_second = parse_rate(text)
            broker.set_rate(key, per_second, session.args.burst)
        except ValueError as exc:
            raise CliError(str(exc), Exit.USAGE) from None
        burst = session.args.burst or 1
        session.print(f"{key}: at most {format_rate(per_second)}, {burst} at once")
        return
    limit = _positive(text)
    broker.set_limit(key, limit)
    session.print(f"{key}: at most {limit} running")


def _clear(session: Session, key: str) -> None:
    broker = session.broker
    broker.set_limit(key, None)
    if broker.capabilities.rate_limits and any(u.key == key and u.override for u in broker.rates()):
        broker.set_rate(key, None)
    session.print(f"{key}: override cleared")


def cmd_limits(session: Session) -> int:
    """Show concurrency and rate limits with their usage, or set/clear a run-time override."""
    args, broker = session.args, session.broker
    if not broker.capabilities.concurrency_limits:
        raise CliError(f"{type(broker).__name__} doesn't enforce concurrency limits", Exit.ERROR)
    if args.action in ("set", "clear"):
        if not args.key:
            raise CliError(f"limits {args.action} needs a KEY (see potatoq limits)", Exit.USAGE)
        if args.action == "set":
            _set(session, args.key, args.limit)
        else:
            _clear(session, args.key)
        return Exit.OK
    usage = broker.limits()
    rates = broker.rates() if broker.capabilities.rate_limits else []
    if args.json:
        session.json(limits_json(usage) + rates_json(rates))
        return Exit.OK
    if usage:
        session.print(limits_table(usage, session.style))
    if rates:
        session.print(("\n" if usage else "") + rates_table(rates, session.style))
    if not usage and not rates:
        session.print("no concurrency or rate limit in use")
    return Exit.OK


def register(command: Registrar) -> None:
    command(
        "limits",
        "concurrency and rate limits: usage, and set/clear a limit at run time",
        arguments=_arguments,
    )(guarded(cmd_limits))
