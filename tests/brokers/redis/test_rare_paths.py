"""Redis / Valkey paths that lost, stuck or misordered work before (issue 24): a sequence
counter past 2^40, the heartbeat records of dead nodes, a reaped chord header, a claim
whose reply was lost."""

from __future__ import annotations

import time
from collections.abc import Callable

from potatoq.brokers.base import WorkerInfo
from potatoq.brokers.redis import RedisBroker
from tests.brokers.redis.test_broker import claim_one, msg, raw_client

SEQ_LIMIT = 2**40


def test_priorities_stay_apart_when_the_sequence_counter_passes_2_to_the_40(broker: RedisBroker) -> None:
    """The ready score is -priority * 2^40 + seq: a seq of 2^40 or more would sort a
    priority-1 task behind an older priority-0 one. The counter is set just below the limit."""
    client = raw_client(broker)
    older = msg(priority=0)
    broker.enqueue([older])
    client.set(f"{broker.keys.prefix}seq", SEQ_LIMIT - 3)
    urgent = [msg(priority=1) for _ in range(6)]
    for message in urgent:  # one call each: the counter crosses the limit midway
        broker.enqueue([message])
    later = msg(priority=0)
    broker.enqueue([later])
    claimed = [claim_one(broker).id for _ in range(8)]
    assert claimed == [m.id for m in urgent] + [older.id, later.id]
    assert int(client.get(f"{broker.keys.prefix}seq") or 0) < SEQ_LIMIT


def test_renumbering_keeps_every_queue_in_order(broker: RedisBroker) -> None:
    client = raw_client(broker)
    first = [msg(queue="a", priority=p) for p in (0, 2, 0, 2)]
    second = [msg(queue="b") for _ in range(3)]
    broker.enqueue(first + second)
    client.set(f"{broker.keys.prefix}seq", SEQ_LIMIT - 1)
    broker.enqueue([msg(queue="a", priority=2, id="a-last"), msg(queue="b", id="b-last")])
    assert [claim_one(broker, ["a"]).id for _ in range(5)] == [
        first[1].id,
        first[3].id,
        "a-last",
        first[0].id,
        first[2].id,
    ]
    assert [claim_one(broker, ["b"]).id for _ in range(4)] == [m.id for m in second] + ["b-last"]


def test_heartbeat_records_of_dead_nodes_are_forgotten_after_recovery(
    make: Callable[..., RedisBroker],
) -> None:
    """A node id is new on each run, so a dead node's record must go once its leases were
    reaped (two dead_after periods of silence), while a live node's stays."""
    broker = make(dead_after=0.2)
    dead, live = "dead-node", "live-node"

    def info(node: str) -> WorkerInfo:
        return WorkerInfo(node, "host", 1, ("default",), 1, time.time())

    broker.heartbeat(info(dead))
    deadline = time.monotonic() + 30
    while dead in {w.node for w in broker.workers()}:
        assert time.monotonic() < deadline, "the dead node's heartbeat record was never forgotten"
        broker.heartbeat(info(live))
        broker.recover(0.2, 5)
        time.sleep(0.05)
    assert live in {w.node for w in broker.workers()}
