"""Celery with its defaults (prefork pool, no result backend)."""

from __future__ import annotations

import time

import redis
from celery import Celery

from . import COUNTER, LATENCIES, url

app = Celery("bench", broker=url())
_client: dict[int, redis.Redis] = {}


def client() -> redis.Redis:
    import os

    return _client.setdefault(os.getpid(), redis.Redis.from_url(url()))


@app.task(name="noop")
def noop(i: int) -> None:
    client().incr(COUNTER)


@app.task(name="stamp")
def stamp(sent: float) -> None:
    client().rpush(LATENCIES, time.time() - sent)


def send(task: str, *args: object) -> None:
    {"noop": noop, "stamp": stamp}[task].delay(*args)
