"""``benchmarks.scale`` on Redis / Valkey: a backlog of ready and delayed tasks and stored
results, and the server memory each takes.

The tasks go in through ``enqueue`` itself, 10,000 per call (ten script calls of 1,000 in
one pipeline), so the keys are exactly those ``enqueue.lua`` writes: a ``job:<id>`` hash
and a member of ``q:backlog:ready`` or ``q:backlog:delayed``. The results are written by
pipelined ``SET result:<id> ... PX`` of an encoded :class:`ResultRecord`, the key
``result_store.lua`` writes (its other step, waking ``.get()`` callers, has none to wake).

Memory is ``INFO memory``'s ``used_memory`` before and after each part, so it is only the
backlog's on a server of its own (``--redis-url``); ``MEMORY USAGE`` of one job hash and of
one result is printed beside it. Every key of the run has a prefix of its own and is
deleted at the end.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.scale_target import Target, message
from potatoq.brokers import create_broker
from potatoq.brokers.base import Broker, BrokerConfig, ResultRecord

CHUNK = 10_000  # messages per enqueue call, results per pipeline


def used_memory(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


def fill_redis(broker: Broker, client: Any, ready: int, delayed: int, results: int) -> tuple[int, int]:
    before = used_memory(client)
    far = time.time() + 3e7  # a year ahead: stays delayed for the whole run
    for count, eta in ((ready, None), (delayed, far)):
        for start in range(0, count, CHUNK):
            broker.enqueue([message("backlog", eta) for _ in range(min(CHUNK, count - start))])
    middle = used_memory(client)
    keys = getattr(broker, "keys")  # noqa: B009
    ttl = int(broker.config.result_expires * 1000)
    # One encoded record for all: the value's size is what matters, and encoding a million
    # records would make the fill slower than the writes.
    value = ResultRecord(
        task_id=uuid.uuid4().hex, state="SUCCESS", result=None, date_done=time.time()
    ).encode()
    tag = uuid.uuid4().hex[:8]
    for start in range(0, results, CHUNK):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(start + CHUNK, results)):
            pipe.set(keys.result(f"{tag}{i:024d}"), value, px=ttl)  # as long as a uuid hex id
        pipe.execute()
    return middle - before, used_memory(client) - middle


def _samples(broker: Broker, client: Any) -> list[tuple[str, str]]:
    """``MEMORY USAGE`` of one waiting task's hash and of one result: the per-key view."""
    keys = getattr(broker, "keys")  # noqa: B009
    rows = []
    for what, pattern in (("a waiting task's `job:` hash", "job:*"), ("one `result:` key", "result:*")):
        _, found = client.scan(0, match=keys.prefix + pattern, count=1000)
        if found:
            rows.append((f"`MEMORY USAGE` of {what}", f"{client.memory_usage(found[0], samples=0):,} bytes"))
    return rows


def delete_prefix(client: Any, prefix: str) -> None:
    cursor = 0
    while True:
        cursor, found = client.scan(cursor, match=prefix + "*", count=10_000)
        if found:
            client.unlink(*found)
        if cursor == 0:
            return


@contextmanager
def redis_target(args: argparse.Namespace) -> Iterator[Target]:
    import redis

    prefix = f"pq-scale-{uuid.uuid4().hex[:8]}"
    broker = create_broker(BrokerConfig(url=args.redis_url, transport_options={"global_keyprefix": prefix}))
    client = redis.Redis.from_url(args.redis_url)
    try:
        yield Target(
            broker,
            lambda r, d, s: fill_redis(broker, client, r, d, s),
            "server memory (`used_memory`)",
            extra=lambda: _samples(broker, client),
        )
    finally:
        broker.close()
        delete_prefix(client, prefix + ":")
        client.close()
