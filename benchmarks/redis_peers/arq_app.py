"""arq with its defaults (asyncio, up to 10 jobs at a time per worker)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings

from . import COUNTER, LATENCIES, url


async def noop(ctx: dict[str, Any], i: int) -> None:
    await ctx["redis"].incr(COUNTER)


async def stamp(ctx: dict[str, Any], sent: float) -> None:
    await ctx["redis"].rpush(LATENCIES, time.time() - sent)


class WorkerSettings:
    functions = [noop, stamp]
    redis_settings = RedisSettings.from_dsn(url())


_loop: list[Any] = []


def send(task: str, *args: object) -> None:
    if not _loop:
        loop = asyncio.new_event_loop()
        _loop.extend([loop, loop.run_until_complete(create_pool(WorkerSettings.redis_settings))])
    loop, pool = _loop
    loop.run_until_complete(pool.enqueue_job(task, *args))
