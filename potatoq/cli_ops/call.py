"""``potatoq call NAME``: send a task by name and print its id (for ``result`` / ``revoke``)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

from potatoq.exceptions import MessageTooLarge, SerializationError
from potatoq.sendchecks import PRIORITY_RANGE

from .argtypes import number_of_seconds, whole_number
from .session import CliError, Exit, Registrar, Session, guarded

__all__ = ["register"]


def _json_of(kind: type, example: str, option: str) -> Any:
    def parse(text: str) -> Any:
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"{option} isn't valid JSON ({exc}); e.g. {option} {example!r}"
            ) from None
        except RecursionError:
            raise argparse.ArgumentTypeError(f"{option} is nested too deeply to send") from None
        if not isinstance(value, kind):
            name = "array" if kind is list else "object"
            raise argparse.ArgumentTypeError(
                f"{option} must be a JSON {name}, got {type(value).__name__}; e.g. {option} {example!r}"
            )
        return value

    return parse


def _moment(text: str) -> float | str:
    """Seconds from now, or an ISO 8601 time (naive means UTC, as in Celery)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds or an ISO 8601 time such as 2030-01-31T03:00:00+00:00, got {text!r}"
        ) from None
    return text


def _iso_time(text: str) -> str:
    try:
        dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time such as 2030-01-31T03:00:00+00:00, got {text!r}"
        ) from None
    return text


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="the task's registered name, e.g. proj.tasks.add")
    parser.add_argument(
        "-a",
        "--args",
        metavar="JSON",
        type=_json_of(list, "[2, 3]", "--args"),
        default=[],
        help="positional arguments, a JSON array",
    )
    parser.add_argument(
        "-k",
        "--kwargs",
        metavar="JSON",
        type=_json_of(dict, '{"x": 2}', "--kwargs"),
        default={},
        help="keyword arguments, a JSON object",
    )
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--countdown", type=number_of_seconds(), metavar="S", help="run it S seconds from now")
    when.add_argument(
        "--eta", type=_iso_time, metavar="TIME", help="run it at an ISO 8601 time (naive = UTC)"
    )
    parser.add_argument(
        "--expires", type=_moment, metavar="S|TIME", help="drop it if it hasn't started by then"
    )
    parser.add_argument("-Q", "--queue", help="queue (default: the task's route, else task_default_queue)")
    parser.add_argument(
        "--priority", type=whole_number(*PRIORITY_RANGE), metavar="P", help="priority (higher runs first)"
    )
    parser.add_argument("--task-id", metavar="ID", help="use this id instead of a new one")


def cmd_call(session: Session) -> int:
    """Send a task by name; print its id on stdout."""
    args = session.args
    app = session.app
    if session.args_app_given() and args.name not in app.tasks:
        session.note(f"{args.name!r} isn't a task of app {app.main!r}; sending it anyway")
    options: dict[str, Any] = {
        key: value
        for key, value in (
            ("countdown", args.countdown),
            ("eta", args.eta),
            ("expires", args.expires),
            ("queue", args.queue),
            ("priority", args.priority),
            ("task_id", args.task_id),
        )
        if value is not None
    }
    session.broker  # noqa: B018 - a bad URL is reported before anything else
    try:
        result = app.send_task(args.name, args=args.args, kwargs=args.kwargs, **options)
    except (SerializationError, MessageTooLarge) as exc:  # the message names the argument
        raise CliError(str(exc), Exit.USAGE) from None
    session.print(result.id)
    return Exit.OK


def register(command: Registrar) -> None:
    command("call", "send a task by name and print its id", arguments=_arguments)(guarded(cmd_call))
