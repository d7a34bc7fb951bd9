"""Redis Cluster in the contract suite: a private 3-master, 3-replica cluster of this
machine's redis-server (tests/faults/redis_cluster.py), started once per test process on
first use and stopped at exit; or the cluster ``POTATOQ_TEST_REDIS_CLUSTER_URL`` names.
One key prefix per test, its keys deleted from every master afterwards."""

from __future__ import annotations

import atexit
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from potatoq.brokers.base import Broker, BrokerConfig
from tests import services

NAME = "redis-cluster"
ORDER = 32
SLOW_FALLBACK_OPTIONS = {"socket_timeout": 60.0}

_lock = threading.Lock()
_started: list[Any] = []


def url() -> str:
    given = os.environ.get("POTATOQ_TEST_REDIS_CLUSTER_URL")
    if given:
        return given
    if services.SERVERLESS:
        pytest.skip("needs a Redis Cluster: not part of make test-fast")
    from tests.faults.redis_cluster import RedisCluster, available

    with _lock:
        if not _started:
            problem = available()
            if problem is not None:
                if services.IN_CI:
                    pytest.fail(f"can't start a Redis Cluster: {problem}", pytrace=False)
                pytest.skip(f"can't start a Redis Cluster: {problem}")
            cluster = RedisCluster().start()
            atexit.register(cluster.stop)
            _started.append(cluster)
        return str(_started[0].url)


def delete_prefix(target: str, prefix: str) -> None:
    """Delete every key of ``prefix`` on every master (its hash tags start ``{prefix``)."""
    from redis.cluster import RedisCluster as Client

    from potatoq.brokers.redis.cluster import cluster_nodes

    nodes, options = cluster_nodes(target)
    client = Client(startup_nodes=nodes, **options)
    try:
        for node in client.get_primaries():
            conn = client.get_redis_connection(node)
            keys = list(conn.scan_iter(match=f"{{{prefix}*", count=1000))
            for key in keys:
                conn.unlink(key)
    finally:
        client.close()


def make_config(ctx: Any) -> BrokerConfig:
    target = url()
    prefix = f"pqtest:{ctx.unique}"
    ctx.cleanup(lambda: delete_prefix(target, prefix))
    return BrokerConfig(url=target, transport_options={"global_keyprefix": prefix})


def inject_raw(broker: Broker, queue: str, raw: bytes) -> str:
    """Write a job with payload ``raw`` (possibly garbage) straight into its queue's slot."""
    keys = broker.keys  # type: ignore[attr-defined]
    client = broker._client()  # type: ignore[attr-defined]
    prefix = keys.of_queue(queue)
    task_id = f"raw-{uuid.uuid4().hex[:12]}"
    seq = client.incr(f"{prefix}seq")
    pipe = client.pipeline(transaction=False)
    fields = {"payload": raw, "queue": queue, "priority": 0, "deliveries": 0, "seq": seq, "state": "ready"}
    pipe.hset(f"{prefix}job:{task_id}", mapping=fields)
    pipe.zadd(keys.ready(queue), {task_id: seq})
    pipe.sadd(keys.queues, queue)
    pipe.zadd(keys.marker(queue), {"m": 0})
    pipe.execute()
    return task_id


def private_broker(dead_after: float) -> Iterator[Any]:
    """A :class:`RedisClusterBroker` with a key prefix of its own (``yield from`` it in a
    fixture); its keys are deleted afterwards."""
    from potatoq.brokers import create_broker
    from potatoq.brokers.redis.cluster import RedisClusterBroker

    target = url()
    prefix = f"pqtest:c{uuid.uuid4().hex[:10]}"
    made = create_broker(
        BrokerConfig(url=target, transport_options={"global_keyprefix": prefix}, dead_after=dead_after)
    )
    assert isinstance(made, RedisClusterBroker)
    try:
        yield made
    finally:
        made.close()
        delete_prefix(target, prefix)
