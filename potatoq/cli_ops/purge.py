"""``potatoq purge (-Q QUEUES | --all-queues) [-X QUEUES] [-f]``: delete waiting tasks.

Running tasks stay. Purging every queue the broker knows of (the ones ``potatoq queues``
lists) takes an explicit ``--all-queues``: a cron line whose ``-Q "$QUEUE"`` expands to
nothing must fail, not wipe every queue. It asks first, unless ``-f``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from potatoq.brokers.estimates import approx

from .confirm import confirm
from .session import CliError, Exit, Registrar, Session, guarded

__all__ = ["register", "split_names"]


def split_names(values: Sequence[str] | None) -> list[str]:
    """``-Q a,b -Q c`` → ``["a", "b", "c"]`` (``celery`` read as the ``default`` queue)."""
    from potatoq.routing import queue_name

    names: list[str] = []
    for value in values or ():
        names += [queue_name(name.strip()) for name in value.split(",") if name.strip()]
    return list(dict.fromkeys(names))


def named_queues(values: Sequence[str] | None, all_queues: bool) -> list[str] | None:
    """The queues ``-Q`` names, or None for ``--all-queues``; blank lists are refused."""
    if all_queues:
        if values:
            raise CliError("give either -Q QUEUES or --all-queues, not both", Exit.USAGE)
        return None
    if not values:
        raise CliError("name the queues to purge with -Q QUEUES, or pass --all-queues", Exit.USAGE)
    for value in values:
        if not split_names([value]):
            raise CliError(
                f"-Q {value!r} names no queue (an unset variable?); pass --all-queues to purge every queue",
                Exit.USAGE,
            )
    return split_names(values)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-Q",
        "--queues",
        action="append",
        metavar="QUEUES",
        help="these queues (comma-separated, repeatable)",
    )
    parser.add_argument(
        "--all-queues", action="store_true", help="every queue the broker knows of (instead of -Q)"
    )
    parser.add_argument("-X", "--exclude-queues", action="append", metavar="QUEUES", help="not these queues")
    parser.add_argument("-f", "--force", action="store_true", help="don't ask for confirmation")


def cmd_purge(session: Session) -> int:
    """Delete waiting (ready and scheduled) tasks."""
    args = session.args
    named = named_queues(args.queues, args.all_queues)  # before connecting: a usage error first
    broker = session.broker
    stats = {s.queue: s for s in broker.queue_stats()}
    queues = sorted(stats) if named is None else named
    excluded = set(split_names(args.exclude_queues))
    queues = [q for q in queues if q not in excluded]
    if not queues:
        session.print("no queues to purge")
        return Exit.OK
    waiting = sum(stats[q].waiting + stats[q].delayed for q in queues if q in stats)
    estimated = any(stats[q].estimated for q in queues if q in stats)
    # Nothing counted: purge without asking anyway (cheap, and a broker whose stats can't
    # see every delayed task still gets them deleted).
    if not args.force and waiting:
        plural = "s" if waiting != 1 else ""
        count = approx(waiting) if estimated else str(waiting)  # a large queue's count is an estimate
        question = f"Delete {count} waiting task{plural} from {', '.join(queues)}? There is no undo."
        if not confirm(session, question):
            session.note("aborted: nothing deleted")
            return Exit.ABORTED
    deleted = broker.purge(queues)
    session.print(f"{deleted} task{'s' if deleted != 1 else ''} deleted from {', '.join(queues)}")
    return Exit.OK


def register(command: Registrar) -> None:
    command("purge", "delete waiting tasks (running ones stay)", arguments=_arguments)(guarded(cmd_purge))
