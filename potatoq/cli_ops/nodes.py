"""Worker nodes as the heartbeats describe them, for ``status``, ``queues`` and ``inspect``.

Nothing here talks to a worker: every answer comes from the last heartbeat each node wrote
to the broker (``Broker.workers()``), so it works the same on every broker and needs no
broadcast channel. A node whose last heartbeat is older than ``worker_dead_after`` is
*lost*: other workers will recover its tasks.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from potatoq.brokers.base import Broker, RunningTask, WorkerInfo

__all__ = ["Node", "read_nodes", "running_json"]


@dataclasses.dataclass(frozen=True)
class Node:
    info: WorkerInfo
    now: float
    dead_after: float

    @property
    def name(self) -> str:
        return self.info.node

    def named(self, names: Sequence[str]) -> bool:
        """True for the full node name, or the ``-n`` name it was started with (the node
        name adds ``:pid-random`` to it, so that restarts are separate nodes)."""
        return self.name in names or self.name.rpartition(":")[0] in names

    @property
    def seen_age(self) -> float:
        return max(0.0, self.now - self.info.last_seen)

    @property
    def online(self) -> bool:
        return self.seen_age <= self.dead_after

    @property
    def state(self) -> str:
        return "online" if self.online else "lost"

    @property
    def uptime(self) -> float:
        return max(0.0, self.now - self.info.started_at)

    def runtime(self, task: RunningTask) -> float:
        return max(0.0, self.now - task.started_at)

    def to_json(self) -> dict[str, Any]:
        info = self.info
        return {
            "node": info.node,
            "state": self.state,
            "hostname": info.hostname,
            "pid": info.pid,
            "queues": list(info.queues),
            "concurrency": info.concurrency,
            "processed": info.processed,
            "started_at": info.started_at,
            "uptime": round(self.uptime, 3),
            "last_seen": info.last_seen,
            "last_seen_age": round(self.seen_age, 3),
            "running": running_json(self),
        }


def running_json(node: Node) -> list[dict[str, Any]]:
    return [
        {
            "pid": task.pid,
            "id": task.task_id,
            "task": task.task,
            "started_at": task.started_at,
            "runtime": round(node.runtime(task), 3),
        }
        for task in node.info.running
    ]


def read_nodes(broker: Broker, dead_after: float, *, only: Sequence[str] = ()) -> list[Node]:
    """Nodes by name, online ones first; ``only`` keeps just those (see :meth:`Node.named`)."""
    now = time.time()
    nodes = [Node(info, now, dead_after) for info in broker.workers()]
    if only:
        nodes = [n for n in nodes if n.named(only)]
    return sorted(nodes, key=lambda n: (not n.online, n.name))
