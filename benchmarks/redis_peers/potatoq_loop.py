"""potatoq's worker hot path on the Redis broker: claim, run, settle_and_claim.

Run as ``python -m benchmarks.redis_peers.potatoq_loop`` (one process per worker). This is
the broker loop a potatoq worker child runs, without the supervisor around it.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, Complete, WorkerRef
from potatoq.message import Message, new_id

from . import COUNTER, LATENCIES, url

QUEUES = ["default"]


def config() -> BrokerConfig:
    return BrokerConfig(url=url(), transport_options={"global_keyprefix": "bench"})


def send(task: str, *args: Any) -> None:
    _producer().enqueue([Message(id=new_id(), task=task, args=args)])


_BROKER = None


def _producer() -> Any:
    global _BROKER
    if _BROKER is None:
        _BROKER = create_broker(config())
    return _BROKER


def main() -> None:
    broker = create_broker(config())
    client = redis.Redis.from_url(url())
    tasks = {
        "noop": lambda i: client.incr(COUNTER),
        "stamp": lambda sent: client.rpush(LATENCIES, time.time() - sent),
    }
    worker = WorkerRef("bench", os.getpid())
    delivery = broker.claim(QUEUES, worker)
    while True:
        if delivery is None:
            broker.wait(QUEUES, 1.0)
            delivery = broker.claim(QUEUES, worker)
            continue
        message = delivery.message
        assert message is not None
        tasks[message.task](*message.args)
        _, delivery = broker.settle_and_claim(delivery, Complete(), QUEUES, worker)


if __name__ == "__main__":
    main()
