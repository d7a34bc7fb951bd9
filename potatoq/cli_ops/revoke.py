"""``potatoq revoke [--terminate [--signal SIG]] ID…``: stop tasks from running.

A revoked task that was still waiting (ready or scheduled) is removed from its queue (or,
on brokers that can't delete, skipped when delivered) and its result becomes REVOKED.
Without ``--terminate`` a task that is already running finishes, and one that has finished
keeps its result: those ids are reported, and the exit status is 3. With ``--terminate``
the worker running the task sends its process ``--signal`` (SIGTERM) within about a second,
kills it after a grace, and records the task as REVOKED (see ``potatoq.terminate``).
"""

from __future__ import annotations

import argparse
import time

from potatoq import states
from potatoq.brokers.base import ResultRecord
from potatoq.exceptions import TaskRevokedError
from potatoq.result import encode_exception
from potatoq.terminate import parse_signal, request_termination

from .session import Exit, Registrar, Session, guarded

__all__ = ["register"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ids", nargs="+", metavar="ID", help="task ids")
    parser.add_argument(
        "--terminate", action="store_true", help="also stop the task if it is running (signal its process)"
    )
    parser.add_argument(
        "-s", "--signal", default=None, metavar="SIG", help="the signal --terminate sends (default SIGTERM)"
    )


def cmd_revoke(session: Session) -> int:
    """Revoke waiting tasks; report the ids that weren't waiting."""
    broker = session.broker
    backend = session.backend
    args = session.args
    if args.signal is not None and not args.terminate:
        session.note("--signal only applies with --terminate")
        return Exit.USAGE
    try:
        signum = parse_signal(args.signal) if args.terminate else None
    except ValueError as exc:
        session.note(str(exc))
        return Exit.USAGE
    missed: list[str] = []
    for task_id in dict.fromkeys(args.ids):
        if signum is not None:
            with session.using_backend():
                request_termination(broker, task_id, signum)
        if not broker.revoke(task_id):
            if signum is not None:
                session.print(f"terminating {task_id} if it is running ({signum.name})")
                continue
            missed.append(task_id)
            continue
        if backend is not None and broker.capabilities.revoke_deletes:
            # A broker that only records revocations writes the REVOKED state itself.
            record = ResultRecord(
                task_id=task_id,
                state=states.REVOKED,
                result=encode_exception(TaskRevokedError(f"task {task_id} revoked")),
                date_done=time.time(),
            )
            with session.using_backend():
                backend.store_result(record)
        session.print(f"revoked {task_id}")
    for task_id in missed:
        session.note(f"{task_id} isn't waiting (running, finished or unknown): not revoked")
    return Exit.FAILED if missed else Exit.OK


def register(command: Registrar) -> None:
    command(
        "revoke", "stop waiting tasks from running (--terminate: running ones too)", arguments=_arguments
    )(guarded(cmd_revoke))
