"""``Broker.held_by``: what a supervisor asks after a child died, on every broker.

Brokers that say they list holders (SQLite, PostgreSQL, Redis) must list exactly the
deliveries an exact (node, pid) holds, fenced by their tokens: their workers' children don't
report each task to their supervisor, which asks this instead. Brokers whose claims end
with their connection (RabbitMQ, where the supervisor can't settle) may list nothing.
"""

from __future__ import annotations

import uuid

from potatoq.brokers.base import Complete, Requeue, WorkerRef
from potatoq.message import Message
from tests.conftest import BrokerMaker

CHILD = WorkerRef("node-held", 4242)
SIBLING = WorkerRef("node-held", 4243)


def _claim(broker, worker: WorkerRef):  # type: ignore[no-untyped-def]
    for _ in range(200):
        delivery = broker.claim(["held"], worker)
        if delivery is not None:
            return delivery
        broker.wait(["held"], 0.1)
    raise AssertionError("nothing to claim")


def test_held_by_lists_one_holders_claims_and_they_settle(make_broker: BrokerMaker) -> None:
    broker = make_broker()
    broker.enqueue([Message(id=str(uuid.uuid4()), task="faults.add", queue="held") for _ in range(3)])
    mine = [_claim(broker, CHILD), _claim(broker, CHILD)]
    other = _claim(broker, SIBLING)
    held = broker.held_by(CHILD)
    must_list = broker.capabilities.lists_holders and broker.capabilities.supervisor_settles
    if not must_list:  # their claims end on their own: nothing to check but that it answers
        for delivery in (*mine, other):
            broker.settle(delivery, Complete())
        return
    assert sorted((d.id, d.token) for d in held) == sorted((d.id, d.token) for d in mine)
    assert all(d.worker == CHILD and d.message is not None for d in held)
    assert broker.held_by(WorkerRef("node-held", 9999)) == []
    assert broker.settle(held[0], Requeue(crashed=True))  # the supervisor's settle of a lost claim
    assert [d.id for d in broker.held_by(CHILD)] == [held[1].id]
    again = _claim(broker, SIBLING)
    assert again.id == held[0].id and again.deliveries == 2
    for delivery in (held[1], other, again):
        assert broker.settle(delivery, Complete())
    assert broker.held_by(CHILD) == [] and broker.held_by(SIBLING) == []
