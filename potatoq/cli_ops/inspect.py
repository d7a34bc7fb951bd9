"""``potatoq inspect active|registered|stats|ping|active_queues``, Celery's names and shapes.

Celery broadcasts these to live workers and waits for replies; potatoq answers them from
the heartbeat every worker writes to the broker (every ``worker_heartbeat_interval``), so
they work on every broker and never wait for a timeout. Only *online* nodes answer (seen
within ``worker_dead_after``); none online is exit status 3, like Celery's "no nodes
replied". ``--json`` prints ``{node: reply}``, as ``celery inspect --json`` does.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from potatoq.utils.printable import printable

from .nodes import Node, read_nodes, running_json
from .output import duration
from .session import Exit, Registrar, Session, guarded

__all__ = ["register"]


def _active(node: Node) -> Any:
    return [
        {
            "id": run["id"],
            "name": run["task"],
            "worker_pid": run["pid"],
            "time_start": run["started_at"],
            "runtime": run["runtime"],
            "hostname": node.name,
        }
        for run in running_json(node)
    ]


def _registered(node: Node) -> Any:
    return list(node.info.registered)


def _stats(node: Node) -> Any:
    info = node.info
    return {
        "pid": info.pid,
        "hostname": info.hostname,
        "pool": {"max-concurrency": info.concurrency, "running": len(info.running)},
        "total": info.processed,
        "uptime": round(node.uptime, 3),
        "queues": list(info.queues),
        "last_heartbeat_age": round(node.seen_age, 3),
    }


def _ping(node: Node) -> Any:
    return {"ok": "pong"}


def _active_queues(node: Node) -> Any:
    return [{"name": queue} for queue in node.info.queues]


REPLIES: dict[str, tuple[Callable[[Node], Any], str]] = {
    "active": (_active, "tasks each node is running now"),
    "registered": (_registered, "task names each node knows"),
    "stats": (_stats, "pid, concurrency, tasks processed, uptime, queues"),
    "ping": (_ping, "which nodes are alive"),
    "active_queues": (_active_queues, "queues each node consumes"),
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
    if method == "registered":
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
    for name, (_, help_text) in REPLIES.items():
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
    build = REPLIES[args.inspect_method][0]
    replies = {n.name: build(n) for n in nodes}
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
        "Celery-style inspect (active, registered, stats, ping, active_queues)",
        arguments=_arguments,
    )(guarded(cmd_inspect))
