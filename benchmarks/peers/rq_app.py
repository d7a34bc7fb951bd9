"""RQ with its defaults (each ``rq worker`` forks a work horse per job)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from rq import Queue

from .. import record
from . import url


def noop(i: int) -> None:
    record.done()


def stamp(sent: float) -> None:
    record.started(sent)


TASKS = {"noop": noop, "stamp": stamp}
_queue: list[Queue] = []


def queue() -> Queue:
    if not _queue:
        _queue.append(Queue("default", connection=redis.Redis.from_url(url())))
    return _queue[0]


def send(task: str, *args: Any) -> None:
    queue().enqueue(TASKS[task], *args)


def send_many(task: str, args_list: Sequence[Sequence[Any]]) -> None:
    """``Queue.enqueue_many``: one pipeline per batch."""
    q = queue()
    q.enqueue_many([Queue.prepare_data(TASKS[task], args=tuple(args)) for args in args_list])
