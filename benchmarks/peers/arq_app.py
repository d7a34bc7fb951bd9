"""arq with its defaults (asyncio, up to 10 jobs at a time per worker, 0.5 s poll).

arq pins redis<6 while Celery's kombu needs redis>=6.4, so it runs from its own
virtualenv (``.venv-bench-arq``)."""

from __future__ import annotations

import asyncio
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings

from .. import record
from . import url


async def noop(ctx: dict[str, Any], i: int) -> None:
    record.done()


async def stamp(ctx: dict[str, Any], sent: float) -> None:
    record.started(sent)


class WorkerSettings:
    functions = [noop, stamp]
    redis_settings = RedisSettings.from_dsn(url())


_loop: list[Any] = []


def send(task: str, *args: Any) -> None:
    if not _loop:
        loop = asyncio.new_event_loop()
        _loop.extend([loop, loop.run_until_complete(create_pool(WorkerSettings.redis_settings))])
    loop, pool = _loop
    loop.run_until_complete(pool.enqueue_job(task, *args))


send_many = None  # arq has no batch enqueue
