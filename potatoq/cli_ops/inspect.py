"""``potatoq inspect METHOD``: Celery's inspect methods (active, scheduled, reserved, registered,
stats, ping, active_queues), with Celery's names and shapes.

Celery broadcasts these to live workers and waits for replies; potatoq answers them from
the heartbeat every worker writes to the broker (every ``worker_heartbeat_interval``), so
they work on every broker and never wait for a timeout. Only *online* nodes answer (seen
within ``worker_dead_after``); none online is exit status 3, like Celery's "no nodes
replied". ``--json`` prints ``{node: reply}``, as ``celery inspect --json`` does.
"""

from __future__ import annotations

import argparse
from typing import Any

from potatoq.control import reply_for
from potatoq.utils.printable import printable

from .nodes import Node, read_nodes
from .output import duration
from .session import Exit, Registrar, Session, guarded

__all__ = ["register"]


#: The inspect methods, with their help lines; the replies are built by ``potatoq.control``
#: (the same as ``app.control.inspect()`` returns).
METHODS: dict[str, str] = {
    "active": "tasks each node is running now",
    "scheduled": "tasks with an eta each node holds (none: the broker holds them)",
    "reserved": "tasks each node took but hasn't started (none: no prefetch)",
    "registered": "task names each node knows",
    "stats": "pid, concurrency, tasks processed, uptime, queues",
    "ping": "which nodes are alive",
    "active_queues": "queues each node consumes",
}


def _text(method: str, node: Node, reply: Any) -> list[str]:
    """The lines shown under ``-> node: OK`` for people."""
    if method == "ping":
        return ["pong"]
    if method == "active":
        return [
            f"* {r['name'] or '?'}[{r['id']}] pid {r['worker_pid']}, running for {duration(r['runtime'])}"
            for r in reply
        ] or ["- empty -"]
    if method in ("registered", "scheduled", "reserved"):
        return [f"* {name}" for name in reply] or ["- empty -"]
    if method == "active_queues":
        return [f"* {q['name']}" for q in reply] or ["- empty -"]
    return [f"{key}: {_plain(value)}" for key, value in reply.items()]


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)


def _arguments(parser: argparse.ArgumentParser) -> None:
    methods = parser.add_subparsers(dest="inspect_method", metavar="METHOD", required=True)
    for name, help_text in METHODS.items():
        sub = methods.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "-d",
            "--destination",
            action="append",
            metavar="NODE",
            help="only these nodes (comma-separated, repeatable)",
        )
        sub.add_argument("-j", "--json", action="store_true", help="print {node: reply} as JSON")


def cmd_inspect(session: Session) -> int:
    """Celery-style inspection, answered from the workers' heartbeats."""
    args = session.args
    only = [name.strip() for value in args.destination or () for name in value.split(",") if name.strip()]
    nodes = [
        n
        for n in read_nodes(session.broker, float(session.app.conf.worker_dead_after), only=only)
        if n.online
    ]
    replies = {n.name: reply_for(args.inspect_method, n.info, n.now, session.broker) for n in nodes}
    if args.json:
        session.json(replies)
    else:
        style = session.style
        for node in nodes:
            session.print(f"-> {printable(node.name)}: {style('OK', 'green')}")
            for line in _text(args.inspect_method, node, replies[node.name]):
                session.print(f"    {printable(line)}")
        if nodes:
            session.print()
            session.print(f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} online.")
    if not nodes:
        where = f" named {', '.join(only)}" if only else ""
        session.note(
            f"no worker{where} online: no heartbeat within worker_dead_after "
            f"({float(session.app.conf.worker_dead_after):g}s) on broker {session.broker_url}"
        )
        return Exit.FAILED
    return Exit.OK


def register(command: Registrar) -> None:
    command(
        "inspect",
        "Celery-style inspect (active, scheduled, reserved, registered, stats, ping, active_queues)",
        arguments=_arguments,
    )(guarded(cmd_inspect))
