"""Limits and unique keys on the Redis Cluster layout (cluster_limits.py, cluster_unique.py):
what the contract suites (tests/test_broker_limits.py, _rates.py, _unique.py, which run on
the cluster too) can't see:

* a busy worker's ``settle_and_claim`` claims past a task whose slot is taken, and that
  task's wait is not a delivery;
* a running task keeps its slot while its lease is extended (the slot's lease is its
  task's: renewed together);
* a settler that dies before releasing a unique key (the queue slot's ``uqfree`` list)
  leaves it to the next recovery round.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from potatoq.brokers.base import Complete, WorkerRef
from potatoq.brokers.limits import HEADER as LIMIT
from potatoq.brokers.redis.cluster import RedisClusterBroker
from potatoq.brokers.unique import HEADER as UNIQUE
from potatoq.message import Message
from tests.factories import redis_cluster as factory

WORKER = WorkerRef("cluster-limits-test", 1)


@pytest.fixture
def broker() -> Iterator[RedisClusterBroker]:
    yield from factory.private_broker(dead_after=30.0)


@pytest.fixture
def short_lease() -> Iterator[RedisClusterBroker]:
    yield from factory.private_broker(dead_after=2.0)


def msg(headers: dict[str, Any] | None = None, queue: str = "default") -> Message:
    return Message(id=uuid.uuid4().hex, task="t", queue=queue, headers=headers or {})


def running_of(broker: RedisClusterBroker, key: str) -> int:
    return next((u.running for u in broker.limits() if u.key == key), 0)


def test_settle_and_claim_claims_past_a_task_whose_slot_is_taken(broker: RedisClusterBroker) -> None:
    free0, held, waits, free1 = msg(), msg({LIMIT: ["one", 1]}), msg({LIMIT: ["one", 1]}), msg()
    broker.enqueue([free0, held, waits, free1])
    first = broker.claim(["default"], WORKER)
    holder = broker.claim(["default"], WORKER)
    assert first is not None and holder is not None
    assert (first.id, holder.id) == (free0.id, held.id)
    settled, claimed = broker.settle_and_claim(first, Complete(), ["default"], WORKER)
    assert settled and claimed is not None and claimed.id == free1.id  # past ``waits``
    assert running_of(broker, "one") == 1
    # The holder's settle gives the slot back and makes ``waits`` due at once: no backoff.
    settled, claimed = broker.settle_and_claim(holder, Complete(), ["default"], WORKER)
    assert settled and claimed is not None and claimed.id == waits.id
    assert claimed.deliveries == 1  # waiting for the slot was not a delivery
    assert broker.settle(claimed, Complete()) is True
    assert running_of(broker, "one") == 0


def test_an_extended_task_keeps_its_slot(short_lease: RedisClusterBroker) -> None:
    broker = short_lease
    broker.enqueue([msg({LIMIT: ["one", 1]}), msg({LIMIT: ["one", 1]})])
    holder = broker.claim(["default"], WORKER)
    assert holder is not None
    # 2.5 leases: the slot would have run out twice. Extends 0.2 s apart against a 2 s lease:
    # a loaded machine would have to stall this loop for 1.8 s to lose the slot.
    ends = time.monotonic() + 5.0
    while time.monotonic() < ends:
        broker.extend([holder], 2.0)  # what the supervisor does for a running task
        assert broker.claim(["default"], WORKER) is None
        time.sleep(0.2)  # the supervisor's extend interval (dead_after / 3 at most)
    assert running_of(broker, "one") == 1
    assert broker.settle(holder, Complete()) is True
    assert running_of(broker, "one") == 0


def test_a_unique_key_a_dead_settler_never_released_is_released_by_recovery(
    broker: RedisClusterBroker,
) -> None:
    held = msg({UNIQUE: ["k", None, 1]})
    broker.enqueue([held])
    delivery = broker.claim(["default"], WORKER)
    assert delivery is not None
    # Only the settle script, as a worker killed right after it: the key is still held.
    name, args = broker._pack.settle(delivery, Complete())
    assert broker._run_at(broker.keys.of_queue("default"), name, args) == 1
    duplicate = msg({UNIQUE: ["k", None, 1]})
    broker.enqueue([duplicate])
    assert duplicate.duplicate_of == held.id
    broker.recover(30.0, 5)
    fresh = msg({UNIQUE: ["k", None, 1]})
    broker.enqueue([fresh])
    assert fresh.duplicate_of is None
