"""Redis 7 in the contract suite: one key prefix per test, deleted with SCAN afterwards."""

from __future__ import annotations

import uuid
from typing import Any

import redis

from potatoq.brokers.base import Broker, BrokerConfig
from tests import services

NAME = "redis"
SERVICE = "redis"
ORDER = 30
# every periodic fallback slow (the due-time wake-up contract test): a blocked wait ends
# on its own after max_block, 20 s at most
SLOW_FALLBACK_OPTIONS = {"socket_timeout": 60.0}


def url() -> str:
    return services.url(SERVICE)


def delete_prefix(client: Any, prefix: str) -> None:
    """Delete every key under ``prefix`` (SCAN, never KEYS, so a shared server isn't blocked)."""
    batch = []
    for key in client.scan_iter(match=f"{prefix}:*", count=500):
        batch.append(key)
        if len(batch) >= 500:
            client.delete(*batch)
            batch.clear()
    if batch:
        client.delete(*batch)


def make_config_for(ctx: Any, target: str) -> BrokerConfig:
    prefix = f"pqtest:{ctx.unique}"

    def cleanup() -> None:
        client = redis.Redis.from_url(target.replace("valkey://", "redis://", 1))
        try:
            delete_prefix(client, prefix)
        finally:
            client.close()

    ctx.cleanup(cleanup)
    return BrokerConfig(url=target, transport_options={"global_keyprefix": prefix})


def make_config(ctx: Any) -> BrokerConfig:
    return make_config_for(ctx, url())


def inject_raw(broker: Broker, queue: str, raw: bytes) -> str:
    """Write a job with payload ``raw`` (possibly garbage) straight into the keys; return its id."""
    keys = broker.keys  # type: ignore[attr-defined]
    client = broker._client()  # type: ignore[attr-defined]
    task_id = f"raw-{uuid.uuid4().hex[:12]}"
    seq = client.incr(f"{keys.prefix}seq")
    pipe = client.pipeline(transaction=True)
    pipe.hset(
        keys.job(task_id),
        mapping={
            "payload": raw,
            "queue": queue,
            "priority": 0,
            "deliveries": 0,
            "seq": seq,
            "state": "ready",
        },
    )
    pipe.zadd(keys.ready(queue), {task_id: seq})
    pipe.sadd(keys.queues, queue)
    pipe.zadd(keys.marker(queue), {"m": 0})
    pipe.execute()
    return task_id
