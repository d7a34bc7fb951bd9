"""``potatoq revoke ID…``: stop waiting tasks from running.

A revoked task that was still waiting (ready or scheduled) is removed from its queue (or,
on brokers that can't delete, skipped when delivered) and its result becomes REVOKED. A
task that is already running finishes (potatoq doesn't kill running tasks remotely) and one
that has finished keeps its result: those ids are reported, and the exit status is 3.
"""

from __future__ import annotations

import argparse
import time

from potatoq import states
from potatoq.brokers.base import ResultRecord
from potatoq.exceptions import TaskRevokedError
from potatoq.result import encode_exception

from .session import Exit, Registrar, Session, guarded

__all__ = ["register"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ids", nargs="+", metavar="ID", help="task ids")


def cmd_revoke(session: Session) -> int:
    """Revoke waiting tasks; report the ids that weren't waiting."""
    broker = session.broker
    backend = session.backend
    missed: list[str] = []
    for task_id in dict.fromkeys(session.args.ids):
        if not broker.revoke(task_id):
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
    command("revoke", "stop waiting tasks from running", arguments=_arguments)(guarded(cmd_revoke))
