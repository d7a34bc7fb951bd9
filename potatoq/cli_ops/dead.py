"""``potatoq dead list|retry|purge``: dead letters, their reason and traceback, replayable.

The broker keeps each dead letter's payload exactly as delivered, with the reason. The
traceback is part of the task's FAILURE result, so it is read from the result backend
(when results are stored) for ``--traceback`` and ``--json``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from potatoq.brokers.base import DeadLetterRecord
from potatoq.exceptions import MessageDecodeError
from potatoq.message import Message
from potatoq.utils.payload import payload_preview
from potatoq.utils.printable import printable

from .argtypes import whole_number
from .confirm import confirm
from .output import Cell, ago, first_line, table
from .session import CliError, Exit, Registrar, Session, guarded

__all__ = ["register"]

#: Characters of an undecodable payload that ``dead list --json`` shows.
JSON_PAYLOAD_CHARS = 4096


def _arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="dead_action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", help="dead letters, newest first", description="dead letters, newest first"
    )
    listing.add_argument(
        "--limit", type=whole_number(1), default=100, metavar="N", help="show at most N (default 100)"
    )
    listing.add_argument("--offset", type=whole_number(0), default=0, metavar="N", help="skip the N newest")
    listing.add_argument("--traceback", action="store_true", help="show each letter's traceback")
    listing.add_argument("-j", "--json", action="store_true", help="print JSON (with tracebacks) for scripts")
    retry = actions.add_parser(
        "retry",
        help="put dead letters back on their queue, payload unchanged",
        description="put dead letters back on their queue, payload unchanged",
    )
    retry.add_argument("ids", nargs="*", metavar="ID", help="task ids of dead letters")
    retry.add_argument("--all", action="store_true", help="every dead letter")
    purge = actions.add_parser(
        "purge", help="delete every dead letter", description="delete every dead letter"
    )
    purge.add_argument("-f", "--force", action="store_true", help="don't ask for confirmation")


# -- list -------------------------------------------------------------------------------------


def _payload(letter: DeadLetterRecord, max_size: int | None) -> dict[str, Any]:
    try:
        message = Message.decode(letter.raw, max_size=max_size)
    except MessageDecodeError as exc:
        # What someone wrote into the broker, maybe megabytes of it: escaped, cut short.
        return {
            "payload": payload_preview(letter.raw, JSON_PAYLOAD_CHARS),
            "payload_bytes": len(letter.raw),
            "payload_error": exc.reason,
        }
    return {
        "args": list(message.args),
        "kwargs": dict(message.kwargs),
        "retries": message.retries,
        "priority": message.priority,
    }


def _undecodable(letter: DeadLetterRecord, max_size: int | None) -> str | None:
    """A short, escaped preview of the payload when it can't be decoded, else None."""
    try:
        Message.decode(letter.raw, max_size=max_size)
    except MessageDecodeError:
        return payload_preview(letter.raw)
    return None


def _tracebacks(session: Session, letters: Sequence[DeadLetterRecord]) -> dict[str, str | None]:
    backend = session.backend
    if backend is None:
        return {}
    found: dict[str, str | None] = {}
    with session.using_backend():
        for letter in letters:
            record = backend.get_result(letter.id)
            found[letter.id] = record.traceback if record is not None else None
    return found


def _list(session: Session) -> int:
    args = session.args
    letters = session.broker.list_dead(limit=args.limit, offset=args.offset)
    max_size = session.broker.config.max_message_size  # as a worker: larger payloads aren't parsed
    now = time.time()
    if args.json:
        tracebacks = _tracebacks(session, letters)
        session.json(
            [
                {
                    "id": d.id,
                    "task": d.task,
                    "queue": d.queue,
                    "reason": d.reason,
                    "died_at": d.died_at,
                    "deliveries": d.deliveries,
                    "traceback": tracebacks.get(d.id),
                    **_payload(d, max_size),
                }
                for d in letters
            ]
        )
        return Exit.OK
    if not letters:
        session.print("no dead letters")
        return Exit.OK
    style = session.style
    if args.traceback:
        tracebacks = _tracebacks(session, letters)
        for d in letters:
            session.print(
                f"{style(printable(d.id), 'bold')}  {printable(d.task or '?')}  queue {printable(d.queue)}"
                f"  died {ago(now - d.died_at)}  deliveries {d.deliveries}"
            )
            session.print(style(printable(d.reason, multiline=True), "red"))
            if (undecodable := _undecodable(d, max_size)) is not None:
                session.print(f"payload: {undecodable}")
            traceback = tracebacks.get(d.id)
            shown = printable(traceback.rstrip(), multiline=True) if traceback else None
            session.print(shown or style("(no traceback stored)", "dim"))
            session.print()
        return Exit.OK
    rows: list[list[Cell]] = [
        [d.id, d.task or "?", d.queue, ago(now - d.died_at), str(d.deliveries), (first_line(d.reason), "red")]
        for d in letters
    ]
    session.print(table(["ID", "TASK", "QUEUE", "DIED", "DELIVERIES", "REASON"], rows, style, right=(4,)))
    if len(letters) == args.limit:
        session.note(f"showing the newest {args.limit}; use --limit/--offset for more")
    return Exit.OK


# -- retry ------------------------------------------------------------------------------------


def _retry(session: Session) -> int:
    args = session.args
    if args.all == bool(args.ids):
        raise CliError("dead retry: give dead letter IDs or --all (not both)", Exit.USAGE)
    broker = session.broker
    ids = list(dict.fromkeys(args.ids)) if args.ids else None
    restored = broker.retry_dead(ids)
    session.print(f"{restored} dead letter{'s' if restored != 1 else ''} put back on their queue")
    if ids is not None and restored < len(ids):
        session.note(
            f"{len(ids) - restored} of {len(ids)} not retried: not a dead letter, expired, "
            "or that task is waiting or running again"
        )
        return Exit.FAILED
    return Exit.OK


# -- purge ------------------------------------------------------------------------------------


def _purge(session: Session) -> int:
    broker = session.broker
    if not session.args.force:
        count = len(broker.list_dead(limit=int(session.app.conf.dead_letter_max) or 10000))
        if not count:
            session.print("no dead letters")
            return Exit.OK
        if not confirm(session, f"Delete {count} dead letter{'s' if count != 1 else ''}? There is no undo."):
            session.note("aborted: nothing deleted")
            return Exit.ABORTED
    deleted = broker.purge_dead()
    session.print(f"{deleted} dead letter{'s' if deleted != 1 else ''} deleted")
    return Exit.OK


def cmd_dead(session: Session) -> int:
    """Dead letters: list them, put them back, or delete them."""
    action = session.args.dead_action
    if action == "list":
        return _list(session)
    if action == "retry":
        return _retry(session)
    return _purge(session)


def register(command: Registrar) -> None:
    command("dead", "dead letters: list (reason, traceback), retry, purge", arguments=_arguments)(
        guarded(cmd_dead)
    )
