"""RabbitMQ's limits and unique keys where the contract suite can't reach them: a process
SIGKILLed while it holds a concurrency slot and a unique key, and ``revoke`` of a task that
waits in the delay cascade. State in a Redis result backend (potatoq/brokers/rabbitmq/store.py)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, Complete
from potatoq.brokers.limits import HEADER as LIMIT
from potatoq.brokers.rabbitmq import RabbitMQBroker
from potatoq.brokers.unique import HEADER as UNIQUE
from potatoq.exceptions import ImproperlyConfigured
from potatoq.message import Message
from tests import services
from tests.factories.redis import delete_prefix

from .test_broker import child, claim_soon

LEASE = 2.0  # seconds: a killed holder's slot comes back within this


class Limited:
    """A RabbitMQ broker (queue prefix of its own) with a Redis result backend (key prefix of its own)."""

    def __init__(self) -> None:
        self.url = services.require("rabbitmq")
        self.redis = services.require("redis")
        tag = uuid.uuid4().hex[:10]
        self.prefix, self.keys = f"l{tag}_", f"pqtest:l{tag}"
        self.backend = create_broker(
            BrokerConfig(url=self.redis, transport_options={"global_keyprefix": self.keys})
        )
        broker = create_broker(
            BrokerConfig(
                url=self.url,
                transport_options={"queue_prefix": self.prefix, "limit_lease": LEASE},
                result_backend=self.backend,
            )
        )
        assert isinstance(broker, RabbitMQBroker)
        self.broker = broker

    def child_config(self) -> str:
        return json.dumps(
            {
                "url": self.url,
                "prefix": self.prefix,
                "backend": self.redis,
                "backend_prefix": self.keys,
                "limit_lease": LEASE,
            }
        )

    def close(self) -> None:
        try:
            self.broker.drop_all()
        finally:
            self.broker.close()
            delete_prefix(self.backend._client(), self.keys)  # type: ignore[attr-defined]
            self.backend.close()


@pytest.fixture
def limited() -> Iterator[Limited]:
    made = Limited()
    yield made
    made.close()


def task(**headers: Any) -> Message:
    return Message(id=str(uuid.uuid4()), task="tests.noop", queue="default", headers=headers)


def running(broker: RabbitMQBroker, key: str) -> int:
    return sum(u.running for u in broker.limits() if u.key == key)


def test_a_killed_holder_leaks_neither_its_slot_nor_its_unique_key(limited: Limited) -> None:
    broker = limited.broker
    held = task(**{LIMIT: ["one", 1], UNIQUE: ["k", None, 1]})
    broker.enqueue([held])
    process = child("claim-and-die", limited.child_config())
    out, _ = process.communicate(timeout=30)
    assert json.loads(out)["id"] == held.id  # it took the slot, then died holding it
    duplicate = task(**{UNIQUE: ["k", None, 1]})
    broker.enqueue([duplicate])
    assert duplicate.duplicate_of == held.id  # RabbitMQ gave the task back, still holding its key
    again = claim_soon(broker, ["default"], timeout=LEASE + 10)
    assert again.id == held.id and again.deliveries == 2  # the dead holder's slot expired
    assert running(broker, "one") == 1
    assert broker.settle(again, Complete()) is True
    assert running(broker, "one") == 0
    fresh = task(**{UNIQUE: ["k", None, 1]})
    broker.enqueue([fresh])
    assert fresh.duplicate_of is None


def test_a_slot_held_by_a_live_process_is_renewed_past_its_lease(limited: Limited) -> None:
    broker = limited.broker
    first, second = task(**{LIMIT: ["one", 1]}), task(**{LIMIT: ["one", 1]})
    broker.enqueue([first, second])
    holding = claim_soon(broker, ["default"])
    assert holding.id == first.id
    deadline = time.monotonic() + 2.5 * LEASE  # well past the lease: only renewal keeps it
    while time.monotonic() < deadline:
        assert running(broker, "one") == 1
        broker.wait(["default"], 0.3)
        assert broker.claim(["default"], holding.worker) is None  # ``second`` stays parked
    assert broker.settle(holding, Complete()) is True
    assert claim_soon(broker, ["default"]).id == second.id


def test_revoke_releases_the_key_of_a_task_waiting_in_the_cascade(limited: Limited) -> None:
    broker = limited.broker
    later = Message(
        id=str(uuid.uuid4()),
        task="tests.noop",
        queue="default",
        eta=time.time() + 3600,
        headers={UNIQUE: ["nightly", None, 1]},
    )
    broker.enqueue([later])
    again = task(**{UNIQUE: ["nightly", None, 1]})
    broker.enqueue([again])
    assert again.duplicate_of == later.id
    assert broker.revoke(later.id) is True
    fresh = task(**{UNIQUE: ["nightly", None, 1]})
    broker.enqueue([fresh])
    assert fresh.duplicate_of is None


def test_with_a_sqlite_result_backend_limits_are_refused_at_send_and_usage_is_empty(tmp_path: Any) -> None:
    backend = create_broker(BrokerConfig(url=f"sqlite:///{tmp_path / 'rb.sqlite3'}"))
    broker = create_broker(
        BrokerConfig(
            url=services.require("rabbitmq"),
            transport_options={"queue_prefix": f"s{uuid.uuid4().hex[:10]}_"},
            result_backend=backend,
        )
    )
    try:
        with pytest.raises(ImproperlyConfigured, match="must be a Redis URL"):
            broker.enqueue([task(**{LIMIT: ["one", 1]})])
        with pytest.raises(ImproperlyConfigured, match="must be a Redis URL"):
            broker.enqueue([task(**{UNIQUE: ["k", None, 1]})])
        assert broker.limits() == [] and broker.rates() == []  # what /metrics reads
    finally:
        broker.close()
        backend.close()
