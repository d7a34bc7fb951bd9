"""Dramatiq with its Redis broker and default middleware."""

from __future__ import annotations

import os
import time

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

from . import COUNTER, LATENCIES, url

dramatiq.set_broker(RedisBroker(url=url()))
_client: dict[int, redis.Redis] = {}


def client() -> redis.Redis:
    return _client.setdefault(os.getpid(), redis.Redis.from_url(url()))


@dramatiq.actor(actor_name="noop")
def noop(i: int) -> None:
    client().incr(COUNTER)


@dramatiq.actor(actor_name="stamp")
def stamp(sent: float) -> None:
    client().rpush(LATENCIES, time.time() - sent)


def send(task: str, *args: object) -> None:
    {"noop": noop, "stamp": stamp}[task].send(*args)
