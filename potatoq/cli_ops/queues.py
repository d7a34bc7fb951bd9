"""``potatoq queues``: waiting, delayed and running tasks per queue, and who consumes them;
``potatoq queues pause NAME`` / ``resume NAME``: stop and restart claims from a queue fleet-wide."""

from __future__ import annotations

import argparse
from collections.abc import Collection, Sequence
from typing import Any

from potatoq.brokers.base import QueueStats
from potatoq.brokers.estimates import display

from .nodes import Node, read_nodes
from .output import Cell, Style, duration, table
from .session import Exit, Registrar, Session, guarded

__all__ = ["queue_rows", "queues_json", "queues_table", "register"]


def queue_rows(
    stats: Sequence[QueueStats], nodes: Sequence[Node], paused: Collection[str] = ()
) -> list[tuple[QueueStats, int]]:
    """Each queue with its number of online consumers; queues with consumers but no tasks
    are listed too (with zeros), so an idle queue and a forgotten one look different, and so
    are paused queues (a pause outlives the queue's last task)."""
    consumers: dict[str, int] = {}
    for node in nodes:
        if node.online:
            for queue in node.info.queues:
                consumers[queue] = consumers.get(queue, 0) + 1
    by_name = {s.queue: s for s in stats}
    for queue in [*consumers, *paused]:
        by_name.setdefault(queue, QueueStats(queue, 0, 0, 0, None))
    return [(by_name[name], consumers.get(name, 0)) for name in sorted(by_name)]


def queues_json(rows: Sequence[tuple[QueueStats, int]], paused: Collection[str] = ()) -> list[dict[str, Any]]:
    return [
        {
            "queue": s.queue,
            "waiting": s.waiting,
            "delayed": s.delayed,
            "running": s.running,
            "oldest_waiting_age": None if s.oldest_waiting_age is None else round(s.oldest_waiting_age, 3),
            "consumers": consumers,
            "paused": s.queue in paused,
            # the counts (of "waiting", "delayed") that are estimates: see docs/cli.md
            "estimated": list(s.estimated),
        }
        for s, consumers in rows
    ]


def queues_table(rows: Sequence[tuple[QueueStats, int]], style: Style, paused: Collection[str] = ()) -> str:
    body: list[list[Cell]] = []
    for s, consumers in rows:
        body.append(
            [
                s.queue,
                display(s, "waiting"),  # "≈1.2M" above the broker's exact-count cap
                display(s, "delayed"),
                str(s.running),
                duration(s.oldest_waiting_age) if s.oldest_waiting_age is not None else "-",
                (str(consumers), None) if consumers or not s.waiting else (str(consumers), "red"),
                ("paused", "yellow") if s.queue in paused else "-",
            ]
        )
    headers = ["QUEUE", "WAITING", "DELAYED", "RUNNING", "OLDEST WAITING", "CONSUMERS", "PAUSED"]
    return table(headers, body, style, right=(1, 2, 3, 4, 5))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--json", action="store_true", help="print JSON for scripts")
    actions = parser.add_subparsers(dest="queues_action", metavar="ACTION")
    for action, text in (
        ("pause", "stop every worker claiming from a queue (running tasks finish; sending still works)"),
        ("resume", "let workers claim from a paused queue again"),
    ):
        sub = actions.add_parser(action, help=text, description=text)
        sub.add_argument("queue", metavar="NAME", help="the queue")


def cmd_queues(session: Session) -> int:
    """Waiting, delayed and running tasks per queue, the oldest wait, online consumers;
    or pause / resume one queue."""
    action = getattr(session.args, "queues_action", None)
    if action is not None:
        return _pause_or_resume(session, action)
    broker = session.broker
    paused = broker.paused_queues()
    rows = queue_rows(
        broker.queue_stats(), read_nodes(broker, float(session.app.conf.worker_dead_after)), paused
    )
    if session.args.json:
        session.json(queues_json(rows, paused))
    elif rows:
        session.print(queues_table(rows, session.style, paused))
    else:
        session.print("no tasks in any queue, and no worker online")
    return Exit.OK


def _pause_or_resume(session: Session, action: str) -> int:
    from potatoq.routing import queue_name

    queue = queue_name(session.args.queue.strip())
    if action == "pause":
        changed = session.broker.pause_queue(queue)
        session.print(f"queue {queue!r} paused" if changed else f"queue {queue!r} was paused already")
    else:
        changed = session.broker.resume_queue(queue)
        session.print(f"queue {queue!r} resumed" if changed else f"queue {queue!r} wasn't paused")
    return Exit.OK


def register(command: Registrar) -> None:
    command(
        "queues",
        "waiting, delayed and running tasks per queue, the oldest waiting task's age; pause/resume NAME",
        arguments=_arguments,
    )(guarded(cmd_queues))
