"""The Redis Cluster layout (potatoq/brokers/redis/cluster.py): what the contract suite
can't see, because it never stops a settle half way.

* a queue's keys share one slot; results and chords have their own;
* a settler that dies between its settle and its relay: the outbox entry stays, the next
  recovery round relays it, and relaying it again changes nothing (result, chord part and
  callback, follow-ups each once);
* a ``redis://`` URL against a cluster node is refused with the fix in the message.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, ChordJoin, Complete, ResultRecord, WorkerRef
from potatoq.brokers.redis.cluster import RedisClusterBroker, cluster_nodes
from potatoq.exceptions import ImproperlyConfigured
from potatoq.message import Message
from tests.factories import redis_cluster as factory

WORKER = WorkerRef("cluster-test", 1)


@pytest.fixture
def broker() -> Iterator[RedisClusterBroker]:
    yield from factory.private_broker(dead_after=0.2)


def msg(queue: str, task_id: str | None = None) -> Message:
    return Message(id=task_id or uuid.uuid4().hex, task="t", queue=queue)


def record(task_id: str, value: str) -> ResultRecord:
    return ResultRecord(task_id=task_id, state="SUCCESS", result=value, date_done=time.time())


def settle_without_relay(broker: RedisClusterBroker, queue: str, outcome: Complete) -> str:
    """Claim a task of ``queue`` and run only its settle script (a worker killed right after)."""
    delivery = broker.claim([queue], WORKER)
    assert delivery is not None
    name, args = broker._pack.settle(delivery, outcome)
    assert broker._run_at(broker.keys.of_queue(queue), name, args) == 1
    return delivery.id


def test_a_queue_keys_share_one_slot_results_and_chords_have_their_own(broker: RedisClusterBroker) -> None:
    client = broker._client()
    keys = broker.keys
    queue_keys = [
        keys.ready("a"),
        keys.delayed("a"),
        keys.active("a"),
        keys.marker("a"),
        keys.of_queue("a") + "job:x",
    ]
    assert len({client.keyslot(k) for k in queue_keys}) == 1
    assert (
        client.keyslot(keys.result("x"))
        == client.keyslot(keys.notify("x"))
        == client.keyslot(keys.waiting("x"))
    )
    assert client.keyslot(keys.of_queue("a")) != client.keyslot(keys.of_queue("b"))


def test_a_settle_whose_relay_never_ran_is_relayed_by_recovery_once(broker: RedisClusterBroker) -> None:
    broker.enqueue([msg("first", "t1")])
    followups = (msg("second", "t1-next"), msg("third", "t1-other"))
    settle_without_relay(broker, "first", Complete(result=record("t1", "done"), followups=followups))
    assert broker.get_result("t1") is None  # the relay is what writes it
    assert broker.claim(["second", "third"], WORKER) is None

    def relayed() -> bool:
        broker.recover(0.2, 5)
        return broker.get_result("t1") is not None

    deadline = time.monotonic() + 10
    while not relayed():
        assert time.monotonic() < deadline, "recovery never relayed the outbox entry"
        time.sleep(0.05)
    result = broker.get_result("t1")
    assert result is not None and result.result == "done"
    assert broker.relay_outboxes() == 0  # the entry is gone
    got = {d.id for d in (broker.claim(["second"], WORKER), broker.claim(["third"], WORKER)) if d}
    assert got == {"t1-next", "t1-other"}
    assert broker.claim(["second", "third"], WORKER) is None


def test_relaying_an_entry_twice_does_each_thing_once(broker: RedisClusterBroker) -> None:
    callback = msg("callbacks", "cb-1")
    broker.enqueue([msg("parts", "p0"), msg("parts", "p1")])
    joins = [ChordJoin(group_id="g1", index=i, size=2, value=b"1", callback=callback) for i in range(2)]
    names = []
    for join in joins:
        delivery = broker.claim(["parts"], WORKER)
        assert delivery is not None
        outcome = Complete(
            result=record(delivery.id, "v"), chord=join, followups=(msg("next", f"{delivery.id}-n"),)
        )
        name, args = broker._pack.settle(delivery, outcome)
        assert broker._run_at(broker.keys.of_queue("parts"), name, args) == 1
        names.append(f"{delivery.id}:{delivery.token}")
    client = broker._client()
    saved = {n: client.lrange(f"{broker.keys.of_queue('parts')}outbox:{n}", 0, -1) for n in names}
    for name in names:
        broker._relay(broker.keys.of_queue("parts"), name)
    for name, ops in saved.items():  # as if a recovery round relayed the same entries again
        client.rpush(f"{broker.keys.of_queue('parts')}outbox:{name}", *ops)
        broker._relay(broker.keys.of_queue("parts"), name)
    assert broker.chord_parts("g1") == [b"1", b"1"]
    assert [d.id for d in iter(lambda: broker.claim(["callbacks"], WORKER), None)] == ["cb-1"]
    assert sorted(d.id for d in iter(lambda: broker.claim(["next"], WORKER), None)) == ["p0-n", "p1-n"]


def test_a_late_relay_never_replaces_a_newer_result(broker: RedisClusterBroker) -> None:
    broker.enqueue([msg("late", "t2")])
    settle_without_relay(broker, "late", Complete(result=record("t2", "old")))
    old_entry = broker._client().zrange(f"{broker.keys.of_queue('late')}outbox", 0, -1)[0].decode()
    broker.enqueue([msg("late", "t2")])  # the same task sent again, run and settled later
    delivery = broker.claim(["late"], WORKER)
    assert delivery is not None
    time.sleep(0.002)  # a later server millisecond for the newer stamp
    assert broker.settle(delivery, Complete(result=record("t2", "new")))
    broker._relay(broker.keys.of_queue("late"), old_entry)
    result = broker.get_result("t2")
    assert result is not None and result.result == "new"


def test_a_plain_redis_url_to_a_cluster_node_is_refused() -> None:
    nodes, _ = cluster_nodes(factory.url())
    plain = create_broker(BrokerConfig(url=f"redis://{nodes[0].host}:{nodes[0].port}/0"))
    with pytest.raises(ImproperlyConfigured, match=r"redis\+cluster://"):
        plain.ping()
    plain.close()


@pytest.mark.parametrize(
    ("url", "problem"),
    [("redis+cluster://h1:7000/3", "database 0"), ("redis+cluster://h1:x/", "bad node")],
)
def test_cluster_urls_are_checked(url: str, problem: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=problem):
        cluster_nodes(url)


def test_cluster_url_lists_nodes_and_credentials() -> None:
    nodes, options = cluster_nodes("rediss+cluster://u:pw@h1:7000,h2:7001/")
    assert [(n.host, n.port) for n in nodes] == [("h1", 7000), ("h2", 7001)]
    assert options == {"ssl": True, "username": "u", "password": "pw"}


def test_the_cluster_client_is_a_cluster_client(broker: RedisClusterBroker) -> None:
    assert isinstance(broker._client(), redis.RedisCluster)


def test_metrics_count_every_queue_slot(broker: RedisClusterBroker) -> None:
    """/metrics of the dashboard: the gauges add up the queues of every slot and master."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from potatoq import Potatoq
    from potatoq.brokers.base import DeadLetter
    from potatoq.dashboard import create_app
    from potatoq.metrics import parse_exposition

    app = Potatoq(
        "clustermetrics",
        broker=factory.url(),
        broker_transport_options={"global_keyprefix": broker.options.global_keyprefix},
        set_as_current=False,
    )
    try:
        broker.enqueue([msg("default") for _ in range(3)] + [msg("other"), msg("doomed")])
        delivery = broker.claim(["doomed"], WORKER)
        assert delivery is not None and broker.settle(delivery, DeadLetter(reason="test"))
        with TestClient(create_app(app, sample_every=0), base_url="http://127.0.0.1:5555") as board:
            response = board.get("/metrics")
        assert response.status_code == 200
        values = parse_exposition(response.text)
        assert values[("potatoq_queue_waiting", (("queue", "default"),))] == 3
        assert values[("potatoq_queue_waiting", (("queue", "other"),))] == 1
        assert values[("potatoq_dead_letters", ())] == 1
        assert [d.id for d in broker.list_dead()] == [delivery.id]
    finally:
        app.close()


def test_a_task_s_history_is_read_from_the_task_index(
    broker: RedisClusterBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task index (history_append.lua's buckets) lives in the history's slot: written
    and read there, not by the scan of the stream kept for records older than the index."""
    from potatoq.brokers.base import HistoryQuery, HistoryRecord
    from potatoq.brokers.redis import history as redis_history

    def done(task_id: str) -> HistoryRecord:
        return HistoryRecord(task_id=task_id, name="t", queue="q", state="SUCCESS", finished_at=time.time())

    broker.append_history([done("mine"), *(done(f"other-{n}") for n in range(30))])
    monkeypatch.setattr(redis_history, "SCAN_MAX", 5)  # a scan would find nothing
    monkeypatch.setattr(redis_history.RedisHistory, "_unindexed_top", lambda self, top: None)
    assert [r.task_id for r in broker.history(HistoryQuery(task_id="mine")).records] == ["mine"]


def test_recovery_builds_the_history_rollups_in_the_history_s_slot(broker: RedisClusterBroker) -> None:
    """history_rollup_build.lua runs in the history stream's slot (its keys share its hash
    tag): a recovery round rolls the records up, and a chart reads them."""
    from potatoq.brokers.base import HistoryRecord

    now = time.time()
    done = [
        HistoryRecord(task_id=f"h{i}", name="t", queue="q", state="SUCCESS", finished_at=now)
        for i in range(3)
    ]
    broker.append_history(done)
    broker.recover(0.2, 5)
    client = broker._client()
    assert client.exists(f"{broker.keys.history}:m1:{int(now // 60)}:t") == 1
    [bucket] = (broker.history_buckets(now - now % 60, 60, 1, "t") or {}).values()
    assert bucket.records == 3
