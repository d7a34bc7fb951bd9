"""RabbitMQ's limits and unique keys where the contract suite can't reach them: a process
SIGKILLed while it holds a concurrency slot and a unique key, and ``revoke`` of a task that
waits in the delay cascade. State in the result backend (potatoq/brokers/rabbitmq/store.py):
each test runs on the Redis, PostgreSQL and SQLite stores (the lease renewal, the slowest,
on Redis and PostgreSQL: SQLite runs the same transitions of store_sql.py)."""

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
from tests.conftest import FactoryContext
from tests.factories.rabbitmq import STORE_BACKENDS, backend_config

from .test_broker import child, claim_soon

LEASE = 2.0  # seconds: a killed holder's slot comes back within this


class Limited:
    """A RabbitMQ broker (queue prefix of its own) with a result backend of ``kind`` (key
    prefix, schema or file of its own)."""

    def __init__(self, kind: str, tmp_path: Any) -> None:
        self.url = services.require("rabbitmq")
        if kind != "sqlite":  # a file in tmp_path
            services.require(kind)
        self.kind = kind
        tag = uuid.uuid4().hex[:10]
        self.prefix = f"l{tag}_"
        self.ctx = FactoryContext(tmp_path=tmp_path, unique=f"l{tag}", overrides={"result_backend": kind})
        self.backend_config = backend_config(self.ctx)
        self.backend = create_broker(self.backend_config)
        self.backend.migrate()  # before a child process opens it too
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
                "backend": self.backend_config.url,
                "backend_options": dict(self.backend_config.transport_options),
                "limit_lease": LEASE,
            }
        )

    def close(self) -> None:
        try:
            self.broker.drop_all()
        finally:
            self.broker.close()
            self.backend.close()
            for fn in reversed(self.ctx.finalizers):
                fn()


@pytest.fixture(params=STORE_BACKENDS)
def limited(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Limited]:
    made = Limited(request.param, tmp_path)
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
    if limited.kind == "sqlite":
        pytest.skip("the SQLite store renews through the same store_sql.py as PostgreSQL's (run there)")
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
    after = claim_soon(broker, ["default"])
    assert after.id == second.id
    assert broker.settle(after, Complete()) is True  # nothing left for the lease thread to renew


def test_closing_the_broker_ends_its_lease_renewal(limited: Limited) -> None:
    # a closed broker's renewal thread kept writing to a store that was gone (another test's
    # dropped schema logged warnings into an unrelated test): close() ends it
    if limited.kind == "sqlite":
        pytest.skip("the same _Leases on every store: run on Redis and PostgreSQL")
    broker = limited.broker
    broker.enqueue([task(**{LIMIT: ["one", 1]})])
    holding = claim_soon(broker, ["default"])
    leases = broker._leases
    assert leases is not None and leases.thread is not None and leases.thread.is_alive()
    broker.close()
    leases.thread.join(timeout=10)
    assert not leases.thread.is_alive()
    assert holding.id  # never settled: its slot lapses after the lease, as a killed holder's


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


def test_without_a_result_backend_limits_and_unique_tasks_are_refused_at_send(tmp_path: Any) -> None:
    broker = create_broker(
        BrokerConfig(
            url=services.require("rabbitmq"), transport_options={"queue_prefix": f"s{uuid.uuid4().hex[:10]}_"}
        )
    )
    try:
        with pytest.raises(ImproperlyConfigured, match="must be a Redis, PostgreSQL or SQLite URL"):
            broker.enqueue([task(**{LIMIT: ["one", 1]})])
        with pytest.raises(ImproperlyConfigured, match="must be a Redis, PostgreSQL or SQLite URL"):
            broker.enqueue([task(**{UNIQUE: ["k", None, 1]})])
        assert broker.limits() == [] and broker.rates() == []  # what /metrics reads
    finally:
        broker.close()
