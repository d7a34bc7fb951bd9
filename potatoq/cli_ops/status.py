"""``potatoq status``: the worker nodes, what each process runs and for how long, the queues.

Exit status 0 when at least one worker is online, 3 when none is (usable as a check).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .nodes import Node, read_nodes, running_json
from .output import Cell, ago, duration, table
from .queues import queue_rows, queues_json, queues_table
from .session import Exit, Registrar, Session, guarded

__all__ = ["register"]


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--json", action="store_true", help="print JSON for scripts")


def _nodes_table(session: Session, nodes: Sequence[Node]) -> str:
    rows: list[list[Cell]] = [
        [
            n.name,
            (n.state, "green" if n.online else "red"),
            n.info.hostname,
            str(n.info.pid),
            str(n.info.concurrency),
            ",".join(n.info.queues),
            duration(n.uptime),
            str(n.info.processed),
            ago(n.seen_age),
        ]
        for n in nodes
    ]
    headers = ["NODE", "STATE", "HOST", "PID", "CONCURRENCY", "QUEUES", "UPTIME", "PROCESSED", "SEEN"]
    return table(headers, rows, session.style, right=(3, 4, 7))


def _running_table(session: Session, nodes: Sequence[Node]) -> str:
    rows: list[list[Cell]] = []
    for node in nodes:
        for task in sorted(node.info.running, key=lambda t: t.started_at):
            rows.append(
                [node.name, str(task.pid), task.task or "?", task.task_id, duration(node.runtime(task))]
            )
    return table(["NODE", "PID", "TASK", "ID", "RUNNING FOR"], rows, session.style, right=(1,))


def cmd_status(session: Session) -> int:
    """Worker nodes (online or lost), their running tasks, and the queues."""
    broker = session.broker
    nodes = read_nodes(broker, float(session.app.conf.worker_dead_after))
    paused = broker.paused_queues()
    rows = queue_rows(broker.queue_stats(), nodes, paused)
    online = [n for n in nodes if n.online]
    if session.args.json:
        session.json(
            {
                "broker": session.broker_url,
                "online": len(online),
                "workers": [n.to_json() for n in nodes],
                "running": [dict(run, node=n.name) for n in nodes for run in running_json(n)],
                "queues": queues_json(rows, paused),
            }
        )
        return Exit.OK if online else Exit.FAILED
    style = session.style
    count = f"{len(online)} worker{'s' if len(online) != 1 else ''} online"
    lost = len(nodes) - len(online)
    session.print(
        f"broker {session.broker_url}: "
        + style(count, "green" if online else "red")
        + (style(f", {lost} lost", "red") if lost else "")
    )
    if nodes:
        session.print()
        session.print(_nodes_table(session, nodes))
        session.print()
        if any(n.info.running for n in nodes):
            session.print(_running_table(session, nodes))
        else:
            session.print("nothing running")
    session.print()
    session.print(queues_table(rows, style, paused) if rows else "no tasks in any queue")
    return Exit.OK if online else Exit.FAILED


def register(command: Registrar) -> None:
    command(
        "status",
        "worker nodes, what each process runs and for how long, and the queues",
        arguments=_arguments,
    )(guarded(cmd_status))
