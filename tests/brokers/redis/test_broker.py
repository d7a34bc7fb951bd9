"""Redis / Valkey specifics the contract suite can't see: scripts, leases, wake-ups, keys.

Every test runs on both Redis 7 and Valkey 8, each under its own key prefix.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.connection

from potatoq.brokers import create_broker
from potatoq.brokers.base import (
    BrokerConfig,
    ChordJoin,
    Complete,
    DeadLetter,
    Delivery,
    Requeue,
    ResultRecord,
    RetryLater,
    WorkerInfo,
    WorkerRef,
)
from potatoq.brokers.redis import RedisBroker, scripts
from potatoq.brokers.redis.broker import ENQUEUE_BATCH
from potatoq.brokers.redis.options import check_server, cluster_enabled, redis_url
from potatoq.brokers.redis.scripts import SCRIPTS, _parse_lib, _source
from potatoq.exceptions import ImproperlyConfigured, InvalidName, OperationalError
from potatoq.message import Message, new_id

WORKER = WorkerRef("node-1", 101)


def msg(queue: str = "default", **fields: Any) -> Message:
    return Message(id=fields.pop("id", None) or new_id(), task="tests.t", queue=queue, **fields)


def raw_client(broker: RedisBroker) -> redis.Redis[bytes]:
    return broker._client()


def claim_one(broker: RedisBroker, queues: list[str] | None = None) -> Delivery:
    delivery = broker.claim(queues or ["default"], WORKER)
    assert delivery is not None
    return delivery


class RoundTrips:
    """Counts what our client writes to its sockets from the thread that made it: one send =
    one round trip (a pipeline is packed into a single send). Instrumentation of the real
    client, not a mock. Other threads are left out: a broker an earlier test of the same
    process left running (a background recovery or limit thread) sends on its own thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[bytes] = []
        original = redis.connection.AbstractConnection.send_packed_command
        thread = threading.get_ident()

        def counting(conn: Any, command: Any, check_health: bool = True) -> None:
            if threading.get_ident() == thread:
                chunks = command if isinstance(command, list | tuple) else [command]
                self.sent.append(b"".join(bytes(c) for c in chunks))
            original(conn, command, check_health)

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)

    def take(self) -> list[bytes]:
        sent, self.sent = self.sent, []
        return sent


# ----------------------------------------------------------------------------- scripts


def test_every_transition_is_one_evalsha_round_trip(
    broker: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.migrate()  # server check and SCRIPT LOAD happen here, not inside the counted calls
    trips = RoundTrips(monkeypatch)
    follow, callback = msg(), msg()
    record = ResultRecord(task_id="x", state="SUCCESS", result=1)

    def one_call(action: Callable[[], Any]) -> Any:
        trips.take()
        value = action()
        sent = trips.take()
        assert len(sent) == 1, sent
        assert b"EVALSHA" in sent[0]
        # one transition script; buffered task-history records may ride in front of it,
        # and a recovery round's rollup build behind it
        appends = sent[0].count(SCRIPTS["history_append"].sha.encode())
        appends += sent[0].count(SCRIPTS["history_rollup_build"].sha.encode())
        assert sent[0].count(b"EVALSHA") - appends == 1
        return value

    one_call(lambda: broker.enqueue([msg() for _ in range(50)]))
    first = one_call(lambda: claim_one(broker))
    one_call(lambda: broker.extend([first], 30))
    join = ChordJoin(group_id="g1", index=0, size=1, value=b"1", callback=callback)
    complete = Complete(result=dataclasses.replace(record, task_id=first.id), followups=(follow,), chord=join)
    assert one_call(lambda: broker.settle(first, complete)) is True
    second = claim_one(broker)
    settled, third = one_call(lambda: broker.settle_and_claim(second, Complete(), ["default"], WORKER))
    assert settled and third is not None
    retry = RetryLater(message=third.message.replace(retries=1, eta=time.time() + 60))  # type: ignore[union-attr]
    assert one_call(lambda: broker.settle(third, retry))
    fourth = claim_one(broker)
    assert one_call(lambda: broker.settle(fourth, Requeue()))
    fifth = claim_one(broker)
    assert one_call(lambda: broker.settle(fifth, DeadLetter(reason="bad")))
    one_call(lambda: broker.recover(60, 5))
    waiting = msg()
    broker.enqueue([waiting])
    assert one_call(lambda: broker.revoke(waiting.id))
    join2 = ChordJoin(group_id="g2", index=0, size=2, value=b"1", callback=callback)
    assert one_call(lambda: broker.chord_join(join2)) is False
    assert one_call(lambda: broker.claim_fire_time("every-minute", 1_700_000_000.0, msg())) is True
    one_call(lambda: broker.store_result(record))
    info = WorkerInfo("node-1", "host", 101, ("default",), 1, time.time())
    one_call(lambda: broker.heartbeat(info))
    assert one_call(broker.retry_dead) == 1
    one_call(broker.queue_stats)
    assert one_call(lambda: broker.purge(["default"])) >= 1
    assert one_call(broker.purge_dead) == 0


def test_scripts_reload_after_script_flush(broker: RedisBroker) -> None:
    broker.enqueue([msg()])
    raw_client(broker).script_flush()
    assert raw_client(broker).script_exists(SCRIPTS["claim"].sha) == [False]
    delivery = claim_one(broker)  # NOSCRIPT, then SCRIPT LOAD and the call again
    assert broker.settle(delivery, Complete())
    assert raw_client(broker).script_exists(SCRIPTS["claim"].sha) == [True]


def test_large_batch_is_pipelined_and_survives_script_flush(broker: RedisBroker) -> None:
    raw_client(broker).script_flush()
    messages = [msg(args=(i,)) for i in range(ENQUEUE_BATCH * 2 + 5)]
    broker.enqueue(messages)
    (stats,) = broker.queue_stats()
    assert stats.waiting == len(messages)
    assert claim_one(broker).message.args == (0,)  # type: ignore[union-attr]


def test_every_script_names_its_keys_and_argv() -> None:
    assert len(SCRIPTS) >= 12
    for script in SCRIPTS.values():
        header = [line for line in script.body.splitlines() if line.startswith("--")]
        assert header[0].startswith(f"-- {script.name.split('.')[0]}:"), script.name
        assert any(line.startswith("-- KEYS:") for line in header), script.name
        assert any(line.startswith("-- ARGV:") for line in header), script.name


def _defined_helpers(source: str) -> set[str]:
    return set(re.findall(r"^local function (\w+)", source, re.MULTILINE))


def test_each_script_carries_only_the_helpers_it_uses(broker: RedisBroker) -> None:
    """Every script compiles on the server with its trimmed helper set, the hot settle
    variant leaves out the other kinds' helpers, and a body calling a helper the trimmed
    source lacks is refused by the server (so a too-eager trim can't pass)."""
    client = raw_client(broker)
    for script in SCRIPTS.values():
        assert client.script_load(script.source) == script.sha, script.name
    lib = Path(scripts.__file__).with_name("lua").joinpath("_lib.lua").read_text()
    hot = _defined_helpers(SCRIPTS["settle_and_claim.complete"].source)
    assert hot >= {"settle_complete", "claim", "fenced_holder"}
    assert not hot & {"settle_dead", "settle_retry", "settle_requeue", "add_dead", "fenced"}
    assert _defined_helpers(SCRIPTS["heartbeat"].source) == {"now_ms"}
    assert _defined_helpers(SCRIPTS["dead_purge"].source) == set()
    for script in SCRIPTS.values():  # the key-layout comment stays in every source
        assert "-- Key layout" in script.source
        assert _defined_helpers(script.source[: -len(script.body)]) <= _defined_helpers(lib)
    header, helpers = _parse_lib(lib)
    # Without a helper it calls (here promote, which claim needs), a script is refused
    # by the server when it runs: the closure above is what keeps every call working.
    body = "return claim_from_argv(2, now_ms())"
    lacking = _source(header, [h for h in helpers if "promote" not in h.names], body)
    assert "local function claim(" in lacking
    with pytest.raises(redis.exceptions.ResponseError, match="promote"):
        client.eval(lacking, 0, broker.keys.prefix, "t", "1000", "n", "1", "1", "default")
    # Named in code, it is included with everything it needs, and runs.
    full = _source(header, helpers, body)
    assert client.eval(full, 0, broker.keys.prefix, "t", "1000", "n", "1", "1", "default") is None


def test_settle_and_claim_variant_refuses_another_kind(broker: RedisBroker) -> None:
    with pytest.raises(redis.exceptions.ResponseError, match="outcome kind dead"):
        broker._run("settle_and_claim.complete", ["dead"])


# ----------------------------------------------------------------------------- keys


def test_keys_live_under_the_prefix_and_scores_encode_priority(broker: RedisBroker) -> None:
    client = raw_client(broker)
    low, high = msg(priority=0), msg(priority=5)
    broker.enqueue([low, high, msg(eta=time.time() + 3600)])
    keys = {k.decode() for k in client.scan_iter(match="*", count=1000) if b"pqtest" in k}
    ours = {k for k in keys if k.startswith(broker.keys.prefix)}
    assert ours and all(k.startswith(broker.keys.prefix) for k in ours)
    assert broker.keys.ready("default") in ours and broker.keys.delayed("default") in ours
    seq_low = int(client.hget(broker.keys.job(low.id), "seq") or 0)
    seq_high = int(client.hget(broker.keys.job(high.id), "seq") or 0)
    assert client.zscore(broker.keys.ready("default"), low.id) == seq_low
    assert client.zscore(broker.keys.ready("default"), high.id) == -5 * 2**40 + seq_high
    assert claim_one(broker).id == high.id


def test_queue_names_that_look_like_key_suffixes_stay_separate(broker: RedisBroker) -> None:
    names = ["a", "a:ready", "ready", "q:a", "a:marker:delayed"]
    for name in names:
        broker.enqueue([msg(name, args=(name,))])
    for name in names:
        delivery = claim_one(broker, [name])
        assert delivery.message.args == (name,)  # type: ignore[union-attr]
        assert broker.claim([name], WORKER) is None
    with pytest.raises(InvalidName):
        broker.enqueue([msg("bad name")])
    with pytest.raises(InvalidName):
        broker.claim(["a*b"], WORKER)


def test_global_keyprefix_must_be_a_string(make: Callable[..., RedisBroker]) -> None:
    with pytest.raises(ImproperlyConfigured, match="global_keyprefix"):
        make(transport_options={"global_keyprefix": ""})
    with pytest.raises(ImproperlyConfigured, match="socket_timeout"):
        make(transport_options={"socket_timeout": "soon"})


# ----------------------------------------------------------------------------- leases


def test_extended_lease_is_kept_and_unextended_lease_is_reaped(make: Callable[..., RedisBroker]) -> None:
    broker = make(dead_after=0.3)
    broker.enqueue([msg()])
    delivery = claim_one(broker)
    # A task running for several lease lengths keeps its claim while the supervisor extends it.
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        broker.extend([delivery], 0.3)
        assert broker.recover(0.3, 5).requeued == 0
        time.sleep(0.05)
    assert broker.settle(delivery, Complete())  # still ours: the token held
    # Without extension the lease runs out and the task goes back to ready.
    broker.enqueue([msg()])
    lost = claim_one(broker)
    deadline = time.monotonic() + 10
    while broker.recover(0.3, 5).requeued == 0:
        assert time.monotonic() < deadline, "expired lease never reaped"
        time.sleep(0.05)
    again = claim_one(broker)
    assert again.id == lost.id and again.deliveries == 2 and again.token != lost.token
    assert broker.settle(lost, Complete()) is False  # fenced: the old holder can't ack
    assert broker.settle(again, Complete()) is True


def test_long_task_with_short_dead_after_runs_exactly_once(make: Callable[..., RedisBroker]) -> None:
    """A task running for many lease lengths, its lease extended by a supervisor thread,
    while another worker keeps reaping and claiming: nobody else ever gets it."""
    # Extended every 0.05 s, a 0.5 s lease leaves the extending thread 0.45 s of slack
    # on a loaded machine.
    broker, rival = make(dead_after=0.5), make(dead_after=0.5)
    task = msg()
    broker.enqueue([task])
    delivery = claim_one(broker)
    running = threading.Event()
    running.set()

    def supervisor() -> None:
        while running.is_set():
            broker.extend([delivery], 0.5)
            time.sleep(0.05)

    extender = threading.Thread(target=supervisor, daemon=True)
    extender.start()
    stolen = []
    until = time.monotonic() + 3.0  # six lease lengths
    while time.monotonic() < until:
        rival.recover(0.5, 5)
        other = rival.claim(["default"], WorkerRef("rival", 2))
        if other is not None:
            stolen.append(other)
        time.sleep(0.02)
    running.clear()
    extender.join(5)
    assert stolen == []
    assert broker.settle(delivery, Complete())


def test_reaping_after_max_deliveries_dead_letters_with_worker_lost(
    make: Callable[..., RedisBroker],
) -> None:
    broker = make(dead_after=0.05)
    poison = msg()
    broker.enqueue([poison])
    deadline = time.monotonic() + 10
    dead = 0
    while dead == 0:
        assert time.monotonic() < deadline
        broker.claim(["default"], WORKER)
        time.sleep(0.06)
        dead = broker.recover(0.05, 2).dead
    (letter,) = broker.list_dead()
    assert letter.id == poison.id and "WorkerLostError" in letter.reason and letter.deliveries == 2
    assert letter.raw == poison.encode()
    result = broker.get_result(poison.id)
    assert result is not None and result.state == "FAILURE" and result.task_id == poison.id
    assert result.result["exc_type"] == "WorkerLostError"


def test_held_set_follows_every_way_a_claim_ends(make: Callable[..., RedisBroker]) -> None:
    """held_by reads a per-process set that claim adds to: each way a claim ends (complete,
    retry, requeue, dead letter, a reaped lease) takes the id out again, so the set holds
    exactly the running tasks and an idle process leaves no key behind."""
    broker = make(dead_after=0.2)
    held_key = f"{broker.keys.prefix}held:{WORKER.node}:{WORKER.pid}"
    client = raw_client(broker)
    broker.enqueue([msg() for _ in range(5)])
    claims = [claim_one(broker) for _ in range(5)]
    assert client.scard(held_key) == 5
    assert sorted(d.id for d in broker.held_by(WORKER)) == sorted(d.id for d in claims)
    assert [d.claimed_at for d in broker.held_by(WORKER)] == sorted(d.claimed_at for d in claims)
    done, retried, requeued, dead, reaped = claims
    retry = RetryLater(message=retried.message.replace(retries=1, eta=time.time() + 60))  # type: ignore[union-attr]
    assert broker.settle(done, Complete())
    assert broker.settle(retried, retry)
    assert broker.settle(requeued, Requeue(crashed=True))
    assert broker.settle(dead, DeadLetter(reason="bad"))
    assert [d.id for d in broker.held_by(WORKER)] == [reaped.id]
    deadline = time.monotonic() + 10
    while broker.recover(0.2, 5).requeued == 0:  # the lease of the last one runs out
        assert time.monotonic() < deadline, "expired lease never reaped"
        time.sleep(0.05)
    assert broker.held_by(WORKER) == []
    assert client.exists(held_key) == 0
    again = claim_one(broker)  # the requeued or the reaped one, held again
    assert [d.token for d in broker.held_by(WORKER)] == [again.token]
    assert broker.held_by(WorkerRef(WORKER.node, WORKER.pid + 1)) == []
    assert broker.settle(again, Complete())


def test_graceful_requeue_keeps_place_and_does_not_count(broker: RedisBroker) -> None:
    first, second = msg(), msg()
    broker.enqueue([first, second])
    delivery = claim_one(broker)
    assert broker.settle(delivery, Requeue(crashed=False))
    again = claim_one(broker)
    assert again.id == first.id and again.deliveries == 1


# ----------------------------------------------------------------------------- wake-ups


class IdleWorkers:
    """``count`` threads, each with its own broker, that claim one task from ``queue``,
    waiting on the marker in between; ``claimed`` gets the ids they took."""

    def __init__(self, make: Callable[..., RedisBroker], queue: str, count: int) -> None:
        self.queue = queue
        self.claimed: list[str] = []
        self.brokers = [make() for _ in range(count)]  # each worker its own connection
        self.threads = [threading.Thread(target=self._run, args=(b,)) for b in self.brokers]
        for t in self.threads:
            t.start()
        deadline = time.monotonic() + 10
        while not all(b._waiting for b in self.brokers):  # all are blocking on the marker
            assert time.monotonic() < deadline
            time.sleep(0.005)
        time.sleep(0.05)  # let the last one's BZPOPMIN reach the server

    def _run(self, broker: RedisBroker) -> None:
        while True:
            delivery = broker.claim([self.queue], WORKER)
            if delivery is not None:
                self.claimed.append(delivery.id)
                return
            broker.wait([self.queue], 30)

    def join(self) -> None:
        for t in self.threads:
            t.join(15)
        assert not any(t.is_alive() for t in self.threads), "a wake-up was lost"


def test_one_enqueue_wakes_a_chain_of_idle_workers(make: Callable[..., RedisBroker]) -> None:
    producer = make()
    producer.ping()
    idle = IdleWorkers(make, "chain", 3)
    producer.enqueue([msg("chain") for _ in range(3)])  # arms the single marker once
    idle.join()
    assert len(set(idle.claimed)) == 3


def test_a_busy_workers_claims_leave_the_wakeup_chain_intact(make: Callable[..., RedisBroker]) -> None:
    """settle_and_claim doesn't re-arm the marker (it never popped one): the idle workers'
    chain, started by the enqueue's one arm, still reaches every idle worker while tasks
    remain, even when the busy worker takes tasks between the links."""
    producer, busy = make(), make()
    producer.ping()
    producer.enqueue([msg("mixed")])
    held = busy.claim(["mixed"], WORKER)
    assert held is not None
    idle = IdleWorkers(make, "mixed", 3)
    producer.enqueue([msg("mixed") for _ in range(5)])  # arms the marker once
    for _ in range(2):  # the busy worker takes two of them, re-arming nothing
        settled, held = busy.settle_and_claim(held, Complete(), ["mixed"], WORKER)
        assert settled and held is not None
    idle.join()
    assert len(set(idle.claimed)) == 3


def test_wakeup_sent_before_blocking_is_not_lost(broker: RedisBroker) -> None:
    assert broker.claim(["gap"], WORKER) is None
    broker.enqueue([msg("gap")])  # lands between "nothing to claim" and "start blocking"
    done = threading.Event()

    def waiter() -> None:
        broker.wait(["gap"], 60)
        done.set()

    threading.Thread(target=waiter, daemon=True).start()
    assert done.wait(15)
    assert broker.claim(["gap"], WORKER) is not None


def test_wait_returns_when_the_earliest_delayed_task_is_due(broker: RedisBroker) -> None:
    later = msg("soon", eta=time.time() + 0.3)
    broker.enqueue([later])
    got: list[Delivery] = []

    def worker() -> None:
        while (delivery := broker.claim(["soon"], WORKER)) is None:
            broker.wait(["soon"], 60)  # no one else will arm the marker: only the due bound wakes it
        got.append(delivery)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    t.join(15)
    assert [d.id for d in got] == [later.id]


def test_claim_promotes_due_delayed_tasks_in_priority_order(broker: RedisBroker) -> None:
    now = time.time()
    early_low = msg(eta=now - 10, priority=0)
    late_high = msg(eta=now + 0.05, priority=9)
    broker.enqueue([early_low, late_high])
    time.sleep(0.06)
    assert claim_one(broker).id == late_high.id
    assert claim_one(broker).id == early_low.id


def test_interrupt_wakes_a_blocked_wait(broker: RedisBroker) -> None:
    broker.ping()
    entered = threading.Event()
    done = threading.Event()

    def waiter() -> None:
        entered.set()
        broker.wait(["idle"], 60)
        done.set()

    threading.Thread(target=waiter, daemon=True).start()
    entered.wait(5)
    deadline = time.monotonic() + 10
    while not done.is_set():  # the waiter may not have reached BZPOPMIN yet: interrupt again
        assert time.monotonic() < deadline
        broker.interrupt()
        done.wait(0.05)


# ----------------------------------------------------------------------------- results


def test_get_is_woken_by_the_completion_notification(make: Callable[..., RedisBroker]) -> None:
    broker, waiter_side = make(), make()
    task = msg()
    broker.enqueue([task])
    delivery = claim_one(broker)
    seen: list[ResultRecord | None] = []
    registered = threading.Event()

    def waiter() -> None:
        registered.set()
        seen.append(waiter_side.wait_for_result(task.id, 60))

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    registered.wait(5)
    client = raw_client(broker)
    deadline = time.monotonic() + 10
    while client.get(broker.keys.waiting(task.id)) is None:  # the waiter has registered interest
        assert time.monotonic() < deadline
        time.sleep(0.01)
    record = ResultRecord(task_id=task.id, state="SUCCESS", result=42)
    assert broker.settle(delivery, Complete(result=record))
    t.join(15)
    assert seen and seen[0] is not None and seen[0].result == 42
    assert client.get(broker.keys.waiting(task.id)) in (None, b"0")


def test_results_nobody_waits_on_push_no_notification(broker: RedisBroker) -> None:
    task = msg()
    broker.enqueue([task])
    delivery = claim_one(broker)
    broker.settle(delivery, Complete(result=ResultRecord(task_id=task.id, state="SUCCESS", result=1)))
    client = raw_client(broker)
    assert client.exists(broker.keys.notify(task.id)) == 0
    ttl = client.pttl(broker.keys.result(task.id))
    assert 0 < ttl <= broker.config.result_expires * 1000


def test_wait_for_result_gives_up_at_its_timeout(broker: RedisBroker) -> None:
    assert broker.wait_for_result("never-ran", 0.05) is None
    broker.store_result(ResultRecord(task_id="started", state="STARTED"))
    record = broker.wait_for_result("started", 0.05)
    assert record is not None and record.state == "STARTED"


# ----------------------------------------------------------------------------- revocation


def test_revoked_task_is_skipped_and_vanished_hashes_too(broker: RedisBroker) -> None:
    revoked, evicted, kept = msg(), msg(), msg()
    broker.enqueue([revoked, evicted, kept])
    assert broker.revoke(revoked.id) is True
    assert broker.revoke(revoked.id) is False
    raw_client(broker).delete(broker.keys.job(evicted.id))  # as eviction would
    assert claim_one(broker).id == kept.id
    assert broker.claim(["default"], WORKER) is None


def test_running_task_is_not_revoked(broker: RedisBroker) -> None:
    broker.enqueue([msg()])
    delivery = claim_one(broker)
    assert broker.revoke(delivery.id) is False
    assert broker.settle(delivery, Complete())


# ----------------------------------------------------------------------------- dead letters


def test_dead_letters_are_capped_by_count(make: Callable[..., RedisBroker]) -> None:
    broker = make(dead_letter_max=3)
    tasks = [msg(args=(i,)) for i in range(5)]
    broker.enqueue(tasks)
    for _ in tasks:
        assert broker.settle(claim_one(broker), DeadLetter(reason="nope"))
    dead = broker.list_dead()
    assert [d.id for d in dead] == [t.id for t in reversed(tasks[2:])]
    client = raw_client(broker)
    assert client.hlen(broker.keys.dead_payload) == 3 and client.hlen(broker.keys.dead_info) == 3


def test_dead_letters_are_capped_by_age(make: Callable[..., RedisBroker]) -> None:
    broker = make(dead_letter_ttl=0.05)
    old, new = msg(), msg()
    broker.enqueue([old, new])
    broker.settle(claim_one(broker), DeadLetter(reason="old"))
    time.sleep(0.06)
    assert broker.list_dead() == []  # hidden once too old, before any trim
    broker.settle(claim_one(broker), DeadLetter(reason="new"))
    assert raw_client(broker).zcard(broker.keys.dead) == 1  # trimmed by the next dead letter


# ----------------------------------------------------------------------------- server checks


def test_cluster_is_detected_from_info() -> None:
    assert cluster_enabled({"cluster_enabled": 1}) is True
    assert cluster_enabled({"cluster_enabled": "1"}) is True
    assert cluster_enabled({"cluster_enabled": 0}) is False
    assert cluster_enabled({}) is False


def test_cluster_server_is_refused(broker: RedisBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    client = raw_client(broker)
    # Only the pipeline's INFO replies are read: make the pipeline report cluster mode.
    pipeline = client.pipeline

    def patched_pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = pipeline(*args, **kwargs)
        execute = pipe.execute

        def execute_with_cluster(*a: Any, **k: Any) -> Any:
            replies = execute(*a, **k)
            return [{**replies[0], "cluster_enabled": 1}, *replies[1:]]

        pipe.execute = execute_with_cluster  # type: ignore[method-assign]
        return pipe

    monkeypatch.setattr(client, "pipeline", patched_pipeline)
    with pytest.raises(ImproperlyConfigured, match="Redis Cluster"):
        check_server(client)


def test_startup_warns_unless_noeviction(
    make: Callable[..., RedisBroker], caplog: pytest.LogCaptureFixture
) -> None:
    admin = raw_client(make())
    original = admin.config_get("maxmemory-policy")["maxmemory-policy"]
    try:
        admin.config_set("maxmemory-policy", "allkeys-lru")
        with caplog.at_level(logging.WARNING, logger="potatoq.brokers.redis"):
            make().ping()
        assert any("noeviction" in r.getMessage() for r in caplog.records)
    finally:
        admin.config_set("maxmemory-policy", original)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="potatoq.brokers.redis"):
        make().ping()
    assert not caplog.records


def test_unreachable_server_raises_operational_error(tmp_path: Path) -> None:
    for url in (f"unix://{tmp_path / 'no-such.sock'}", "redis://127.0.0.1:1/0"):
        broker = create_broker(BrokerConfig(url=url, connection_timeout=1.0))
        with pytest.raises(OperationalError, match="unreachable"):
            broker.ping()
        broker.close()


def test_url_schemes_are_translated_for_redis_py() -> None:
    assert redis_url("valkey://h:6380/0") == "redis://h:6380/0"
    assert redis_url("valkeys://u:p@h/1") == "rediss://u:p@h/1"
    assert redis_url("redis://h/2") == "redis://h/2"
    assert redis_url("unix:///tmp/redis.sock?db=3") == "unix:///tmp/redis.sock?db=3"
    assert RedisBroker.capabilities.results_by_default is False
    assert RedisBroker.capabilities.leases is True


# ----------------------------------------------------------------------------- fork safety


def _claim_in_child(broker: RedisBroker, parent_client_id: int, out: Any) -> None:
    client = broker._client()
    delivery = broker.claim(["default"], WorkerRef("child", 2))
    out.send((id(client) != parent_client_id, delivery.id if delivery else None))


def test_forked_child_opens_its_own_connection(broker: RedisBroker) -> None:
    task = msg()
    broker.enqueue([task])
    parent_client = broker._client()
    receive, send = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(
        target=_claim_in_child, args=(broker, id(parent_client), send)
    )
    child.start()
    fresh, claimed = receive.recv()
    child.join(10)
    assert fresh and claimed == task.id
    parent_client.ping()  # the parent's connection is untouched
    assert broker.claim(["default"], WORKER) is None


def test_a_wait_ends_at_the_due_time_by_the_local_alarm(broker: RedisBroker) -> None:
    """The earliest due time no longer bounds the block's timeout (Redis ends a block only
    on its cron tick, up to 100 ms late): the local alarm pushes the wake key at that time.
    With the timeout left at max_block (20 s), a task due in 0.5 s claimed within 10 s was
    woken for by the alarm."""
    queue = "alarm"
    broker.enqueue([msg(queue, eta=time.time() + 0.5)])
    deadline = time.monotonic() + 10.0
    delivery = None
    while delivery is None and time.monotonic() < deadline:
        broker.wait([queue], 60.0)  # the first returns at once: the enqueue armed the marker
        delivery = broker.claim([queue], WORKER)
    assert delivery is not None, "the wait wasn't ended at the due time"
    assert broker._due_alarm().rung >= 1
