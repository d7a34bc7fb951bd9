"""Celery with its defaults (prefork pool, early acks, prefetch multiplier 4, no result
backend), on Redis or RabbitMQ: ``celery -A benchmarks.peers.celery_app worker -c 2``.

``BENCH_CELERY_ACKS_LATE=1`` configures the guarantee potatoq gives by default instead:
``task_acks_late=True, worker_prefetch_multiplier=1`` (still no publisher confirms)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from celery import Celery, group

from .. import record
from . import url

app = Celery("bench", broker=url())
# Not "celery": on a shared server that queue may be someone else's. Nothing else changes.
app.conf.task_default_queue = "potatoq_bench"
if os.environ.get("BENCH_CELERY_ACKS_LATE") == "1":
    app.conf.task_acks_late = True
    app.conf.worker_prefetch_multiplier = 1


@app.task(name="noop")
def noop(i: int) -> None:
    record.done()


@app.task(name="stamp")
def stamp(sent: float) -> None:
    record.started(sent)


TASKS = {"noop": noop, "stamp": stamp}


def prepare() -> None:
    """Load kombu's transport for the URL (importing its client library) without connecting."""
    app.loader.import_default_modules()
    with app.connection_for_write() as connection:
        _ = connection.transport


def send(task: str, *args: Any) -> None:
    TASKS[task].delay(*args)


def send_many(task: str, args_list: Sequence[Sequence[Any]]) -> None:
    group(TASKS[task].s(*args) for args in args_list).apply_async()
