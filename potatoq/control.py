"""``app.control``: revocation and Celery's ``inspect()`` / ``ping()``, without a broadcast.

Celery sends these to live workers over the broker and collects replies for ``timeout``
seconds. potatoq answers them from what every worker already writes to the broker: its
heartbeat (``Broker.workers()``: node, pid, queues, concurrency, registered task names and
the tasks it runs, every ``worker_heartbeat_interval``) and the claims themselves
(``Broker.queued_task``, for a running task's arguments). So they work on every broker,
never wait for a timeout, and answer for the nodes seen within ``worker_dead_after``.

Replies have Celery's shapes, keyed by node name (``potatoq@host:pid-xxxxxx``; a
``destination`` may also name the ``-n`` name before the colon). Like Celery, an inspect
method with no node to answer returns None.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .brokers.base import Broker, ResultRecord, RunningTask, WorkerInfo
from .exceptions import TaskRevokedError
from .routing import queue_name
from .states import REVOKED
from .terminate import parse_signal, request_termination

if TYPE_CHECKING:
    from .app import Potatoq

__all__ = ["Control", "Inspect", "online_workers", "reply_for"]

Reply = Callable[[WorkerInfo, float, Broker], Any]


def online_workers(
    broker: Broker, dead_after: float, destination: Sequence[str] | None = None, *, now: float | None = None
) -> list[WorkerInfo]:
    """Nodes seen within ``dead_after`` seconds, by name; ``destination`` keeps those named
    (full node name, or the ``-n`` name it was started with)."""
    now = time.time() if now is None else now
    names = list(destination or ())
    found = [
        info
        for info in broker.workers()
        if now - info.last_seen <= dead_after
        and (not names or info.node in names or info.node.rpartition(":")[0] in names)
    ]
    return sorted(found, key=lambda info: info.node)


def _request(info: WorkerInfo, run: RunningTask, now: float, broker: Broker | None) -> dict[str, Any]:
    """One running task as Celery's ``inspect().active()`` describes it."""
    queued = broker.queued_task(run.task_id) if broker is not None else None
    message = queued.message if queued is not None else None
    return {
        "id": run.task_id,
        "name": run.task,
        "type": run.task,
        "args": list(message.args) if message is not None else None,
        "kwargs": dict(message.kwargs) if message is not None else None,
        "hostname": info.node,
        "time_start": run.started_at,
        "acknowledged": False,  # potatoq acknowledges when the task ends (acks_late)
        "delivery_info": {
            "exchange": "",
            "routing_key": message.queue if message is not None else None,
            "priority": message.priority if message is not None else None,
            "redelivered": queued.deliveries > 1 if queued is not None else None,
        },
        "worker_pid": run.pid,
        "runtime": round(max(0.0, now - run.started_at), 3),
    }


def _active(info: WorkerInfo, now: float, broker: Broker | None) -> Any:
    return [_request(info, run, now, broker) for run in info.running]


def _nothing_held(info: WorkerInfo, now: float, broker: Broker | None) -> Any:
    # Workers hold no tasks they aren't running: no prefetch (reserved), and tasks due
    # later stay in the broker until due (scheduled).
    return []


def _registered(info: WorkerInfo, now: float, broker: Broker | None) -> Any:
    return list(info.registered)


def _stats(info: WorkerInfo, now: float, broker: Broker | None) -> Any:
    return {
        "pid": info.pid,
        "hostname": info.hostname,
        "pool": {"max-concurrency": info.concurrency, "running": len(info.running)},
        "total": info.processed,
        "uptime": round(max(0.0, now - info.started_at), 3),
        "queues": list(info.queues),
        "last_heartbeat_age": round(max(0.0, now - info.last_seen), 3),
    }


def _ping(info: WorkerInfo, now: float, broker: Broker | None) -> Any:
    return {"ok": "pong"}


def _active_queues(info: WorkerInfo, now: float, broker: Broker | None) -> Any:
    return [{"name": queue, "routing_key": queue} for queue in info.queues]


#: What each inspect method replies per node, from its heartbeat.
REPLIES: dict[str, Callable[[WorkerInfo, float, Broker | None], Any]] = {
    "active": _active,
    "scheduled": _nothing_held,
    "reserved": _nothing_held,
    "registered": _registered,
    "stats": _stats,
    "ping": _ping,
    "active_queues": _active_queues,
}


def reply_for(method: str, info: WorkerInfo, now: float, broker: Broker | None) -> Any:
    """Node ``info``'s reply to inspect ``method`` (``broker``: to read running tasks' arguments)."""
    return REPLIES[method](info, now, broker)


class Inspect:
    """``app.control.inspect()``: each method returns ``{node: reply}``, or None if no node is online."""

    def __init__(self, app: Potatoq, destination: str | Sequence[str] | None = None, **_: Any) -> None:
        # timeout, callback, connection, limit...: Celery's broadcast options; nothing waits here.
        self.app = app
        self.destination = [destination] if isinstance(destination, str) else destination

    def _replies(self, method: str) -> dict[str, Any] | None:
        broker = self.app.broker
        now = time.time()
        nodes = online_workers(broker, float(self.app.conf.worker_dead_after), self.destination, now=now)
        return {info.node: reply_for(method, info, now, broker) for info in nodes} or None

    def active(self, safe: bool | None = None) -> dict[str, Any] | None:
        """The tasks each node runs now (as of its last heartbeat)."""
        return self._replies("active")

    def scheduled(self, safe: bool | None = None) -> dict[str, Any] | None:
        """Tasks with an eta each node holds: always empty lists (the broker holds them)."""
        return self._replies("scheduled")

    def reserved(self, safe: bool | None = None) -> dict[str, Any] | None:
        """Tasks each node took but hasn't started: always empty lists (no prefetch)."""
        return self._replies("reserved")

    def registered(self, *taskinfoitems: str) -> dict[str, Any] | None:
        """The task names each node knows."""
        return self._replies("registered")

    registered_tasks = registered

    def stats(self) -> dict[str, Any] | None:
        return self._replies("stats")

    def ping(self, destination: str | Sequence[str] | None = None) -> dict[str, Any] | None:
        if destination is not None:
            return Inspect(self.app, destination).ping()
        return self._replies("ping")

    def active_queues(self) -> dict[str, Any] | None:
        return self._replies("active_queues")


class Control:
    """``app.control``: revocation and inspection (Celery's remote control, without the broadcast)."""

    def __init__(self, app: Potatoq) -> None:
        self.app = app

    def inspect(self, destination: str | Sequence[str] | None = None, **kwargs: Any) -> Inspect:
        return Inspect(self.app, destination, **kwargs)

    def ping(
        self, destination: str | Sequence[str] | None = None, timeout: float = 1.0, **_: Any
    ) -> list[dict[str, Any]]:
        """``[{node: {"ok": "pong"}}, ...]`` for each online node, as Celery's ``control.ping()``."""
        replies = Inspect(self.app, destination).ping() or {}
        return [{node: reply} for node, reply in replies.items()]

    def revoke(
        self,
        task_id: str | Sequence[str],
        destination: Any = None,
        terminate: bool = False,
        signal: Any = None,
        **_: Any,
    ) -> None:
        """Revoke tasks: a waiting one never runs; with ``terminate=True`` a running one is
        stopped (its process gets ``signal``, SIGTERM by default) and its result is REVOKED."""
        signum = parse_signal(signal) if terminate else None  # bad input fails before anything is done
        ids = [task_id] if isinstance(task_id, str) else list(task_id)
        broker = self.app.broker
        for one in ids:
            if signum is not None:
                request_termination(broker, one, signum)
            broker.revoke(one)
            backend = self.app.backend
            if backend is not None:
                backend.store_result(
                    ResultRecord(
                        task_id=one, state=REVOKED, result=revoked_exception(one), date_done=time.time()
                    )
                )

    def purge(self) -> int:
        stats = self.app.broker.queue_stats()
        return self.app.broker.purge([s.queue for s in stats])

    def pause_queue(self, queue: str) -> bool:
        """Pause ``queue`` for every worker (within about a second); True if it wasn't paused.

        Running tasks finish; producers can still send to it. Stored in the broker, so it
        survives worker and broker restarts, until :meth:`resume_queue`.
        """
        return self.app.broker.pause_queue(queue_name(queue))

    def resume_queue(self, queue: str) -> bool:
        """Let workers claim from ``queue`` again; True if it was paused."""
        return self.app.broker.resume_queue(queue_name(queue))

    def paused_queues(self) -> dict[str, float]:
        """The paused queues, each with the time (epoch seconds) it was paused at."""
        return self.app.broker.paused_queues()

    # Celery's broadcast commands: there is no broadcast channel, so each names what to use.
    def shutdown(self, *_: Any, **__: Any) -> None:
        _unsupported("shutdown", "send the worker SIGTERM (it finishes or requeues its tasks)")

    def add_consumer(self, *_: Any, **__: Any) -> None:
        _unsupported("add_consumer", "start a worker with -Q for that queue")

    def cancel_consumer(self, *_: Any, **__: Any) -> None:
        _unsupported("cancel_consumer", "restart the worker with the -Q it should consume")

    def rate_limit(self, *_: Any, **__: Any) -> None:
        _unsupported("rate_limit", "set rate_limit on the task or in task_annotations and restart")

    def pool_grow(self, *_: Any, **__: Any) -> None:
        _unsupported("pool_grow", "restart the worker with a larger -c")

    def pool_shrink(self, *_: Any, **__: Any) -> None:
        _unsupported("pool_shrink", "restart the worker with a smaller -c")

    def broadcast(self, command: str, *_: Any, **__: Any) -> None:
        _unsupported(
            f"broadcast({command!r})", "`potatoq status` and `potatoq inspect` read the workers' heartbeats"
        )


def _unsupported(command: str, instead: str) -> None:
    raise NotImplementedError(f"app.control.{command} is not supported (no broadcast channel): {instead}")


def revoked_exception(task_id: str) -> dict[str, Any]:
    """The encoded ``TaskRevokedError`` a revoked task's result holds."""
    return {
        "exc_type": TaskRevokedError.__name__,
        "exc_message": [f"task {task_id} revoked"],
        "exc_module": TaskRevokedError.__module__,
    }
