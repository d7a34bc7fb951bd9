"""``potatoq result ID [--wait S]``: a task's state and value.

Exit status: 0 SUCCESS, 3 FAILURE or REVOKED, 4 not ready (PENDING, STARTED, RETRY) when
the command returns, so ``potatoq result "$id" --wait 60 && deploy`` does what it reads.
An id with no stored result is PENDING (unknown, not finished yet, or expired), as in Celery.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from potatoq import states
from potatoq.brokers.base import ResultRecord
from potatoq.utils.printable import printable

from .argtypes import number_of_seconds
from .output import ago, dump_json, timestamp
from .session import Exit, Registrar, Session, guarded

__all__ = ["describe_exception", "register"]


def describe_exception(data: Any) -> str:
    """``ValueError: boom`` from an exception stored as JSON data."""
    if not isinstance(data, dict) or "exc_type" not in data:
        return str(data)
    message = data.get("exc_message")
    parts = message if isinstance(message, list | tuple) else [message]
    text = ", ".join(str(p) for p in parts if p is not None)
    return f"{data['exc_type']}: {text}" if text else str(data["exc_type"])


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="the task id")
    parser.add_argument(
        "-w",
        "--wait",
        type=number_of_seconds(negative=False),
        metavar="S",
        help="wait up to S seconds for it to finish",
    )
    parser.add_argument("-j", "--json", action="store_true", help="print JSON for scripts")


def status_of(state: str) -> Exit:
    if state == states.SUCCESS:
        return Exit.OK
    if state in states.PROPAGATE_STATES:
        return Exit.FAILED
    return Exit.NOT_READY


def cmd_result(session: Session) -> int:
    """Print a task's state and value; the exit status tells success, failure or not ready."""
    args = session.args
    backend = session.require_backend("potatoq result")
    with session.using_backend():
        found = backend.wait_for_result(args.id, args.wait) if args.wait else backend.get_result(args.id)
    record = found or ResultRecord(task_id=args.id, state=states.PENDING)
    if args.json:
        dump_json(
            {
                "id": record.task_id,
                "state": record.state,
                "task": record.name,
                "result": record.result,
                "traceback": record.traceback,
                "date_done": record.date_done,
                "retries": record.retries,
                "children": list(record.children),
            },
            session.out,
        )
        return status_of(record.state)
    style = session.style
    failed = record.state in states.EXCEPTION_STATES
    value = printable(describe_exception(record.result) if failed else _show(record.result))
    lines = [("id", printable(record.task_id)), ("state", style.state(printable(record.state)))]
    if record.name:
        lines.append(("task", printable(record.name)))
    if record.state != states.PENDING or record.result is not None:
        lines.append(("result", style(value, "red") if failed else value))
    if record.date_done:
        lines.append(("done", f"{timestamp(record.date_done)} ({ago(time.time() - record.date_done)})"))
    if record.retries:
        lines.append(("retries", str(record.retries)))
    if record.state == states.PENDING:
        lines.append(("note", "unknown id, not finished yet, or its result expired"))
    for key, text in lines:
        session.print(f"{key:<8}{text}")
    if record.traceback:
        session.print()
        session.print(printable(record.traceback.rstrip(), multiline=True))
    return status_of(record.state)


def _show(value: Any) -> str:
    import json

    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def register(command: Registrar) -> None:
    command("result", "a task's state and value (exit 3 if it failed, 4 if not ready)", arguments=_arguments)(
        guarded(cmd_result)
    )
