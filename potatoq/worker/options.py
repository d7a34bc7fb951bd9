"""A worker's settings, resolved once from ``app.conf`` and the command line."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Sequence
from typing import Any

from potatoq.brokers.base import validate_queue_name
from potatoq.exceptions import ImproperlyConfigured
from potatoq.routing import queue_name

from .procinfo import available_cpus

__all__ = ["POOLS", "WorkerOptions"]

POOLS = ("prefork", "threads", "solo")


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """Everything the supervisor, the children and the scheduler need to know.

    ``processes`` x ``threads`` tasks run at once: ``-P prefork -c 4 -t 2`` is 4 children of
    2 threads, ``-P threads -c 8`` one child of 8 threads, ``-P solo`` one task in-process.
    """

    queues: tuple[str, ...]
    processes: int
    threads: int
    pool: str
    nodename: str  # shown to humans (``-n``)
    node: str  # unique per run: what claims and heartbeats are recorded under
    max_tasks_per_child: int | None
    max_memory_per_child: int | None  # KiB
    shutdown_timeout: float
    heartbeat_interval: float
    dead_after: float
    max_deliveries: int
    beat: bool = True  # run the periodic scheduler in this worker
    idle_wait: float = 1.0  # longest broker.wait() before a child re-checks for shutdown
    # ... on a broker whose interrupt() can't be missed (capabilities.interruptible_wait):
    # an idle worker then blocks until work or a due time comes instead of polling.
    idle_wait_interruptible: float = 60.0

    @property
    def concurrency(self) -> int:
        return 1 if self.pool == "solo" else self.processes * self.threads

    @classmethod
    def from_app(
        cls,
        app: Any,
        *,
        concurrency: int | None = None,
        threads: int | None = None,
        queues: Sequence[str] | None = None,
        pool: str | None = None,
        nodename: str | None = None,
        max_tasks_per_child: int | None = None,
        max_memory_per_child: int | None = None,
        beat: bool = True,
    ) -> WorkerOptions:
        """Command-line values win over ``app.conf``; None means "use the setting"."""
        conf = app.conf
        pool = (pool or getattr(conf, "worker_pool", None) or "prefork").lower()
        if pool not in POOLS:
            raise ImproperlyConfigured(f"unknown worker pool {pool!r}: use one of {', '.join(POOLS)}")
        count = concurrency if concurrency is not None else conf.worker_concurrency
        count = int(count) if count else available_cpus()
        per_child = int(threads if threads is not None else (getattr(conf, "worker_threads", 1) or 1))
        if count < 1 or per_child < 1:
            raise ImproperlyConfigured("worker concurrency and threads must be at least 1")
        if pool == "threads":  # one child, -c threads (times -t if both given)
            processes, per_child = 1, count * (per_child if threads is not None else 1)
        elif pool == "solo":
            processes, per_child = 1, 1
        else:
            processes = count
        names = tuple(queue_name(q) for q in (queues or (conf.task_default_queue,)))
        for name in names:
            validate_queue_name(name)
        max_tasks = (
            max_tasks_per_child if max_tasks_per_child is not None else conf.worker_max_tasks_per_child
        )
        max_memory = (
            max_memory_per_child if max_memory_per_child is not None else conf.worker_max_memory_per_child
        )
        human = nodename or f"potatoq@{socket.gethostname()}"
        return cls(
            queues=tuple(dict.fromkeys(names)),
            processes=processes,
            threads=per_child,
            pool=pool,
            nodename=human,
            node=f"{human}:{os.getpid()}-{os.urandom(3).hex()}",
            max_tasks_per_child=int(max_tasks) if max_tasks else None,
            max_memory_per_child=int(max_memory) if max_memory else None,
            shutdown_timeout=float(conf.worker_shutdown_timeout),
            heartbeat_interval=float(conf.worker_heartbeat_interval),
            dead_after=float(conf.worker_dead_after),
            max_deliveries=int(conf.task_max_deliveries),
            beat=beat,
        )
