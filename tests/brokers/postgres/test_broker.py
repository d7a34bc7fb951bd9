"""PostgreSQL broker behaviour beyond the contract suite, against the real server.

Each test gets its own schema (dropped afterwards). Wake-up tests give the waiting broker a
30 s safety-net poll and wait with a 20 s timeout, so a return before the timeout can only
come from a NOTIFY; the bound is a correctness check, not a speed measurement.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from potatoq.brokers import create_broker
from potatoq.brokers.base import (
    Broker,
    BrokerConfig,
    Complete,
    DeadLetter,
    Delivery,
    ResultRecord,
    WorkerInfo,
    WorkerRef,
)
from potatoq.brokers.postgres import PostgresBroker, PostgresOptions, migrate, statements, wakeups
from potatoq.exceptions import ImproperlyConfigured, InvalidName
from potatoq.message import Message
from tests.factories.postgres import drop_schema

from .conftest import Make

WORKER = WorkerRef("pg-node", 4242)
QUIET = 30.0  # poll_interval of brokers whose wake-ups must come from NOTIFY
WAIT = 20.0  # < QUIET: returning before this means a notification arrived


def msg(queue: str = "default", **kw: Any) -> Message:
    return Message(id=str(uuid.uuid4()), task="tests.noop", queue=queue, **kw)


def monitor(pg_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(pg_url, autocommit=True)


def claim_within(broker: PostgresBroker, queues: list[str], timeout: float = WAIT) -> Delivery:
    deadline = time.monotonic() + timeout
    while True:
        delivery = broker.claim(queues, WORKER)
        if delivery is not None:
            return delivery
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"nothing claimable from {queues} within {timeout} s")
        broker.wait(queues, remaining)


# ----------------------------------------------------------------------------- transactional enqueue


def test_transactional_enqueue_with_psycopg3_rollback_never_runs_commit_always_does(
    make: Make, pg_url: str
) -> None:
    broker = make(poll_interval=QUIET)
    broker.wait(["tx"], 0)  # LISTEN now, so the commit's NOTIFY is seen
    rolled_back, committed = msg("tx"), msg("tx")
    with psycopg.connect(pg_url) as conn:  # not autocommit: the caller's own transaction
        conn.execute("SELECT 1")
        broker.enqueue([rolled_back], connection=conn)
        conn.rollback()
        broker.enqueue([committed], connection=conn)
        assert broker.claim(["tx"], WORKER) is None, "visible before the caller committed"
        conn.commit()
    started = time.monotonic()
    broker.wait(["tx"], WAIT)
    assert time.monotonic() - started < WAIT, "the caller's COMMIT sent no NOTIFY"
    assert broker._listener.get().notifications >= 1
    assert claim_within(broker, ["tx"]).id == committed.id
    assert broker.claim(["tx"], WORKER) is None
    assert broker.revoke(rolled_back.id) is False


def test_transactional_enqueue_with_psycopg2_rollback_never_runs_commit_always_does(
    make: Make, pg_url: str
) -> None:
    psycopg2 = pytest.importorskip("psycopg2")
    broker = make()
    rolled_back = msg("tx2")
    committed = [msg("tx2", priority=p, eta=None) for p in (0, 5)] + [msg("tx2", eta=time.time() + 3600)]
    conn = psycopg2.connect(pg_url)
    try:
        broker.enqueue([rolled_back], connection=conn)
        conn.rollback()
        broker.enqueue(committed, connection=conn)
        assert broker.claim(["tx2"], WORKER) is None
        conn.commit()
    finally:
        conn.close()
    got = [claim_within(broker, ["tx2"]).id for _ in range(2)]
    assert got == [committed[1].id, committed[0].id]  # priority order; bytes and arrays intact
    assert broker.claim(["tx2"], WORKER) is None
    [stats] = [s for s in broker.queue_stats() if s.queue == "tx2"]
    assert (stats.waiting, stats.delayed, stats.running) == (0, 1, 2)
    assert broker.revoke(rolled_back.id) is False


# ----------------------------------------------------------------------------- no open transactions


def test_a_claimed_running_task_holds_no_transaction(make: Make, pg_url: str) -> None:
    app_name = f"potatoq-test-{uuid.uuid4().hex[:8]}"
    broker = make(application_name=app_name)
    broker.enqueue([msg("long"), msg("long")])
    running = claim_within(broker, ["long"])  # the task is now "running" in this worker
    broker.wait(["long"], 0)  # the LISTEN connection exists too
    broker.heartbeat(WorkerInfo(WORKER.node, "host", WORKER.pid, ("long",), 1, time.time()))
    with monitor(pg_url) as mon:
        rows = mon.execute(
            "SELECT state, xact_start, backend_xmin FROM pg_stat_activity WHERE application_name = %s",
            (app_name,),
        ).fetchall()
    assert len(rows) >= 2, rows  # the claiming connection and the listener
    assert [r[0] for r in rows] == ["idle"] * len(rows), rows
    assert all(r[1] is None and r[2] is None for r in rows), "a connection pins a snapshot"
    assert broker.settle(running, Complete())


# ----------------------------------------------------------------------------- plans and indexes


def _prepared(stmt_text: str, names: list[str]) -> str:
    for number, name in enumerate(names, start=1):
        stmt_text = stmt_text.replace(f"%({name})s", f"${number}")
    return stmt_text


def test_cast_array_parameters_go_in_binary_for_psycopg_3_only() -> None:
    # psycopg 3's text array dumper escapes every element in Python (~30 us per message of
    # a batch); %b sends the binary form. psycopg 2 takes the text form, which keeps %s.
    stmt = statements.Statements("public")["job_enqueue"]
    assert b"%(m_payloads)b::bytea[]" in stmt.query and b"%(m_ids)b::text[]" in stmt.query
    assert b"%(channels)b::text[]" in stmt.query
    assert "%(m_payloads)s::bytea[]" in stmt.text and ")b::" not in stmt.text


def test_batch_enqueue_round_trips_every_field_through_binary_arrays(make: Make) -> None:
    broker = make()
    soon = time.time() + 3600
    messages = [
        Message(id=str(uuid.uuid4()), task="t", args=('é"{},\\',), queue="q1", priority=3),
        Message(id=str(uuid.uuid4()), task="t", args=(b"\x00\xff",), queue="q2", priority=-2, eta=soon),
        Message(id=str(uuid.uuid4()), task="t", queue="q1"),
    ]
    broker.enqueue(messages)
    for message in messages:
        queued = broker.queued_task(message.id)
        assert queued is not None and queued.queue == message.queue
        assert queued.priority == message.priority and queued.message.args == message.args
    assert broker.queued_task(messages[1].id).state == "scheduled"  # type: ignore[union-attr]


def test_claim_and_promote_use_the_partial_indexes_even_with_generic_plans(make: Make, pg_url: str) -> None:
    broker = make()
    broker.enqueue([msg(f"q{i % 5}") for i in range(3000)])
    broker.enqueue([msg("later", eta=time.time() + 86400) for _ in range(2000)])
    schema = broker.schema
    stmts = statements.Statements(schema)
    with monitor(pg_url) as mon:
        mon.execute(sql.SQL("ANALYZE {}.potatoq_jobs").format(sql.Identifier(schema)))
        mon.execute(
            b"PREPARE pq_claim AS "
            + _prepared(
                stmts["job_claim"].text, ["queues", "queue", "worker", "pid", "no_flush", "park"]
            ).encode()
        )
        mon.execute(
            b"PREPARE pq_promote AS "
            + _prepared(stmts["job_promote"].text, ["limit", "channel_prefix", "notify"]).encode()
        )
        for mode in ("force_custom_plan", "force_generic_plan"):
            mon.execute(sql.SQL("SET plan_cache_mode = {}").format(sql.Literal(mode)))
            claim_plan = "\n".join(
                r[0]
                for r in mon.execute("EXPLAIN EXECUTE pq_claim(ARRAY['q3','q1'], NULL, 'n', 1, true, true)")
            )
            claim_one_plan = "\n".join(
                r[0] for r in mon.execute("EXPLAIN EXECUTE pq_claim(NULL, 'q3', 'n', 1, true, true)")
            )
            promote_plan = "\n".join(
                r[0] for r in mon.execute("EXPLAIN EXECUTE pq_promote(1000, 'p:', true)")
            )
            assert "potatoq_jobs_ready" in claim_plan, claim_plan
            assert "Seq Scan" not in claim_plan, claim_plan
            assert "potatoq_jobs_ready" in claim_one_plan, claim_one_plan
            assert "Seq Scan" not in claim_one_plan, claim_one_plan
            assert "potatoq_jobs_scheduled" in promote_plan, promote_plan
            assert "potatoq_jobs_ready" not in promote_plan, promote_plan
    assert broker.claim(["q3"], WORKER) is not None  # EXPLAIN claimed nothing; the real thing works


def test_far_future_etas_stay_out_of_the_ready_scan(make: Make) -> None:
    broker = make()
    far = time.time() + 30 * 86400
    broker.enqueue([msg("mixed", eta=far + i) for i in range(10_000)])
    ready = [msg("mixed") for _ in range(3)]
    for message in ready:
        broker.enqueue([message])
    got = [claim_within(broker, ["mixed"]).id for _ in range(3)]
    assert got == [m.id for m in ready]
    assert broker.claim(["mixed"], WORKER) is None  # promotion ran and left the future ones
    [stats] = [s for s in broker.queue_stats() if s.queue == "mixed"]
    assert (stats.waiting, stats.delayed, stats.running) == (0, 10_000, 3)


def test_jobs_table_autovacuum_and_workers_fillfactor(make: Make, pg_url: str) -> None:
    broker = make()
    broker.migrate()
    with monitor(pg_url) as mon:
        options = dict(
            mon.execute(
                "SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relname IN ('potatoq_jobs', 'potatoq_workers')",
                (broker.schema,),
            ).fetchall()
        )
        indexed = mon.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY (i.indkey) WHERE i.indrelid = %s::regclass",
            (f'"{broker.schema}".potatoq_workers',),
        ).fetchall()
    jobs = set(options["potatoq_jobs"])
    assert {"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_cost_delay=0"} <= jobs, jobs
    assert any(o.startswith("autovacuum_vacuum_threshold=") for o in jobs), jobs
    assert "fillfactor=50" in options["potatoq_workers"]
    assert [r[0] for r in indexed] == ["node"]  # nothing indexes info or last_seen


def test_the_sweep_keeps_each_periodic_entrys_newest_fire_time(make: Make, pg_url: str) -> None:
    """Old fire times are swept, but never an entry's last one: it is the "last run" shown."""
    broker = make()
    for fire_time in (1000.0, 2000.0, 3000.0):
        assert broker.claim_fire_time("weekly", fire_time, None)
    assert broker.claim_fire_time("hourly", 5000.0, None)
    with monitor(pg_url) as mon:  # all of them claimed long ago, past the retention
        mon.execute(
            sql.SQL("UPDATE {}.potatoq_periodic SET claimed_at = now() - interval '30 days'").format(
                sql.Identifier(broker.schema)
            )
        )
        broker._housekeeping()
        left = mon.execute(
            sql.SQL("SELECT name, fire_time FROM {}.potatoq_periodic ORDER BY name").format(
                sql.Identifier(broker.schema)
            )
        ).fetchall()
    assert [(name, float(t)) for name, t in left] == [("hourly", 5000.0), ("weekly", 3000.0)]
    assert broker.last_fire_times(["weekly", "hourly"]) == {"weekly": 3000.0, "hourly": 5000.0}


def test_heartbeats_are_hot_updates(make: Make, pg_url: str) -> None:
    broker = make()
    info = WorkerInfo("hot-node", "host", 1, ("default",), 1, time.time())
    broker.heartbeat(info)
    stmt = statements.Statements(broker.schema)["worker_heartbeat"]
    with psycopg.connect(pg_url) as conn:  # one transaction: its own stats are exact
        for _ in range(20):
            conn.execute(stmt.query, {"node": "hot-node", "info": info.encode()})
        row = conn.execute(
            "SELECT pg_stat_get_xact_tuples_updated(%s::regclass),"
            " pg_stat_get_xact_tuples_hot_updated(%s::regclass)",
            (f'"{broker.schema}".potatoq_workers',) * 2,
        ).fetchone()
        conn.rollback()
    assert row is not None and row[0] == 20
    assert row[1] == 20, f"only {row[1]} of 20 heartbeat updates were HOT"


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "queue",
    ["x'; DROP TABLE potatoq_jobs; --", 'q"q', "a b", "q\x00", "ä", "x" * 201, ""],
)
def test_hostile_queue_names_are_refused_everywhere(make: Make, queue: str) -> None:
    broker = make()
    for call in (
        lambda: broker.enqueue([msg(queue)]),
        lambda: broker.claim([queue], WORKER),
        lambda: broker.wait([queue], 0),
        lambda: broker.purge([queue]),
    ):
        with pytest.raises(InvalidName):
            call()
    broker.enqueue([msg("still-fine")])
    assert broker.claim(["still-fine"], WORKER) is not None


def test_a_hostile_schema_name_is_only_an_odd_identifier(make: Make, pg_url: str) -> None:
    hostile = 'pq_evil"; DROP TABLE pq_canary; --'
    canary = f"pq_canary_{uuid.uuid4().hex[:8]}"
    hostile = hostile.replace("pq_canary", canary)
    with monitor(pg_url) as mon:
        mon.execute(sql.SQL("CREATE TABLE {} (x int)").format(sql.Identifier(canary)))
    try:
        broker = make(schema=hostile)
        sent = msg()
        broker.enqueue([sent])
        assert claim_within(broker, ["default"]).id == sent.id
        with monitor(pg_url) as mon:
            assert mon.execute("SELECT to_regclass(%s)", (canary,)).fetchone() == (canary,)
            assert mon.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (hostile,)).fetchone()
    finally:
        with monitor(pg_url) as mon:
            mon.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(canary)))
    for bad in ("", "x" * 64, "a\x00b", 7):
        with pytest.raises(ImproperlyConfigured):
            PostgresOptions.from_transport_options({"schema": bad})


def test_transport_options_are_checked() -> None:
    assert PostgresOptions.from_transport_options({}) == PostgresOptions()
    with pytest.raises(ImproperlyConfigured, match="unknown"):
        PostgresOptions.from_transport_options({"visibility_timeout": 10})
    with pytest.raises(ImproperlyConfigured, match="notify"):
        PostgresOptions.from_transport_options({"notify": "no"})
    with pytest.raises(ImproperlyConfigured, match="poll_interval"):
        PostgresOptions.from_transport_options({"poll_interval": 0})
    for burst in (0, 2.5, True, "3"):
        with pytest.raises(ImproperlyConfigured, match="notify_burst"):
            PostgresOptions.from_transport_options({"notify_burst": burst})
    assert PostgresOptions.from_transport_options({"notify_burst": 1}).notify_burst == 1


def test_long_queue_names_get_hashed_channels_that_sql_and_python_agree_on(
    make: Make,
) -> None:
    queue = "long-" + "q" * 150
    channel = wakeups.channel_name(wakeups.channel_prefix("s"), queue)
    assert len(channel.encode()) <= 63 and channel.startswith("potatoq:")
    waiter = make(poll_interval=QUIET)
    promoter = make()
    waiter.wait([queue], 0)  # LISTEN on the hashed channel
    heard = waiter._listener.get().notifications
    eta = time.time() + 0.3
    promoter.enqueue([msg(queue, eta=eta)])  # scheduled: no NOTIFY at enqueue
    time.sleep(max(0.0, eta - time.time()) + 0.05)
    promoter.claim(["elsewhere"], WORKER)  # promotes every due task; SQL names the channel
    started = time.monotonic()
    waiter.wait([queue], WAIT)
    assert time.monotonic() - started < WAIT, "the promotion's NOTIFY didn't reach the hashed channel"
    assert waiter._listener.get().notifications > heard
    assert waiter.claim([queue], WORKER) is not None


# ----------------------------------------------------------------------------- wake-ups


def test_listen_wakes_a_waiter_when_another_connection_enqueues(make: Make) -> None:
    waiter = make(poll_interval=QUIET)
    producer = make()
    waiter.wait(["wake"], 0)  # the first wait only LISTENs
    sent = msg("wake")
    timer = threading.Timer(0.1, lambda: producer.enqueue([sent]))
    timer.start()
    try:
        started = time.monotonic()
        waiter.wait(["wake"], WAIT)
        assert time.monotonic() - started < WAIT, "wait() slept through the NOTIFY"
        assert waiter._listener.get().notifications >= 1
        assert waiter.claim(["wake"], WORKER) is not None
    finally:
        timer.join()


def test_every_waiting_thread_of_a_process_wakes(make: Make) -> None:
    waiter = make(poll_interval=QUIET)
    producer = make()
    waiter.wait(["many"], 0)
    returned: list[float] = []

    def wait_once() -> None:
        started = time.monotonic()
        waiter.wait(["many"], WAIT)
        returned.append(time.monotonic() - started)

    threads = [threading.Thread(target=wait_once) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.1)  # let them block
    producer.enqueue([msg("many")])
    for thread in threads:
        thread.join(WAIT + 5)
    assert len(returned) == 3 and max(returned) < WAIT, returned


def test_a_trickle_within_the_burst_is_announced_at_once(make: Make) -> None:
    # A window of 10 minutes: no token comes back during the test, so what is inline and
    # what is held depends only on the count.
    producer = make(notify_debounce=600, notify_burst=3)
    waiter = make(poll_interval=QUIET)
    waiter.wait(["trickle"], 0)
    listener = waiter._listener.get()
    debouncer = producer._debouncer.get()
    for n in range(1, 4):
        heard = listener.notifications
        producer.enqueue([msg("trickle")])
        started = time.monotonic()
        waiter.wait(["trickle"], WAIT)
        assert time.monotonic() - started < WAIT, f"enqueue {n} of the trickle wasn't announced"
        assert listener.notifications > heard
        assert waiter.claim(["trickle"], WORKER) is not None
    assert (debouncer.inline_sent, debouncer.trailing_sent) == (3, 0)
    producer.enqueue([msg("trickle")])  # a 4th within the window: the burst is spent
    assert debouncer.inline_sent == 3, "a 4th NOTIFY within the window went out inline"
    producer.close()  # sends the pending trailing NOTIFY now instead of in 200 s
    started = time.monotonic()
    waiter.wait(["trickle"], WAIT)
    assert time.monotonic() - started < WAIT, "close() dropped the pending trailing NOTIFY"
    assert debouncer.trailing_sent == 1
    assert waiter.claim(["trickle"], WORKER) is not None


def test_a_burst_is_coalesced_and_every_task_is_still_announced(make: Make) -> None:
    producer = make(notify_debounce=2.0, notify_burst=5)  # 5 at once, then one per 0.4 s
    waiter = make(poll_interval=QUIET)
    waiter.wait(["burst"], 0)
    sent = [msg("burst") for _ in range(20)]
    for message in sent:
        producer.enqueue([message])
    debouncer = producer._debouncer.get()
    got = [claim_within(waiter, ["burst"]).id for _ in sent]  # never needs the 30 s poll
    assert got == [m.id for m in sent]
    assert debouncer.inline_sent < len(sent), "every enqueue of the burst sent its own NOTIFY"
    deadline = time.monotonic() + WAIT
    while debouncer.trailing_sent < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert debouncer.trailing_sent >= 1


def test_trailing_notify_wakes_a_waiter_that_already_took_the_first_task(
    make: Make,
) -> None:
    """The held enqueue can only be announced by the trailing NOTIFY: without it, wait()
    sleeps for its whole 20 s and the test fails."""
    producer = make(notify_debounce=2.0, notify_burst=1)
    waiter = make(poll_interval=QUIET)
    waiter.wait(["burst2"], 0)
    producer.enqueue([msg("burst2")])
    waiter.wait(["burst2"], WAIT)
    assert waiter.claim(["burst2"], WORKER) is not None
    assert waiter.claim(["burst2"], WORKER) is None
    heard = waiter._listener.get().notifications
    debouncer = producer._debouncer.get()
    producer.enqueue([msg("burst2")])  # within 2 s of the first: held
    assert (debouncer.inline_sent, debouncer.trailing_sent) == (1, 0)
    started = time.monotonic()
    waiter.wait(["burst2"], WAIT)
    assert time.monotonic() - started < WAIT, "the held enqueue was never announced"
    assert waiter._listener.get().notifications > heard
    assert waiter.claim(["burst2"], WORKER) is not None
    # the waiter can hear the NOTIFY before the producer's timer thread has its result back
    deadline = time.monotonic() + WAIT
    while debouncer.trailing_sent < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert debouncer.trailing_sent == 1


def test_a_busy_process_keeps_draining_its_listen_connection(make: Make) -> None:
    """No thread waits (they are all "running tasks"), yet notifications are consumed, so
    this backend never holds back the server's notification queue."""
    waiter = make(poll_interval=QUIET)
    producer = make(notify_debounce=0)  # one NOTIFY per enqueue
    waiter.wait(["busy"], 0)  # LISTEN, then never wait again
    listener = waiter._listener.get()
    for _ in range(50):
        producer.enqueue([msg("busy")])
    deadline = time.monotonic() + WAIT
    while listener.notifications < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert listener.notifications == 50
    started = time.monotonic()
    waiter.wait(["busy"], WAIT)  # they arrived while nobody waited: returns at once
    assert time.monotonic() - started < WAIT
    assert waiter.claim(["busy"], WORKER) is not None


def test_notify_false_works_by_polling(make: Make, pg_url: str) -> None:
    app_name = f"potatoq-poll-{uuid.uuid4().hex[:8]}"
    producer = make(notify=False)
    waiter = make(notify=False, application_name=app_name)
    sent = msg("polled")
    timer = threading.Timer(0.1, lambda: producer.enqueue([sent]))
    timer.start()
    try:
        assert claim_within(waiter, ["polled"], timeout=15).id == sent.id
    finally:
        timer.join()
    assert waiter._listener.pop() is None, "notify=False opened a LISTEN connection"
    with monitor(pg_url) as mon:
        listening = mon.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query ILIKE 'LISTEN%%'",
            (app_name,),
        ).fetchone()
    assert listening == (0,)


def test_interrupt_wakes_a_blocked_wait(make: Make) -> None:
    broker = make(poll_interval=QUIET)
    broker.wait(["int"], 0)
    done = threading.Event()

    def block() -> None:
        broker.wait(["int"], WAIT)
        done.set()

    thread = threading.Thread(target=block)
    thread.start()
    time.sleep(0.1)
    broker.interrupt()
    assert done.wait(WAIT - 5), "interrupt() didn't wake wait()"
    thread.join()


# ----------------------------------------------------------------------------- fork safety


def test_a_forked_child_never_touches_the_parents_connection(make: Make) -> None:
    broker = make()
    broker.enqueue([msg("fork")])
    with broker._connection() as conn:
        parent_backend = conn.info.backend_pid
    broker.wait(["fork"], 0)  # the parent has a LISTEN connection too
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            broker.enqueue([msg("fork")])
            with broker._connection() as conn:
                code = 0 if conn.info.backend_pid != parent_backend else 2
            broker.close()
            gc.collect()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with broker._connection() as conn:
        assert conn.info.backend_pid == parent_backend
        assert not conn.closed and not conn.broken
    assert [claim_within(broker, ["fork"]) is not None for _ in range(2)] == [True, True]
    broker.wait(["fork"], 0)  # the parent's listener survived the child's close()


# ----------------------------------------------------------------------------- dead letters and heartbeats


def _dies(broker: PostgresBroker, message: Message, reason: str) -> None:
    broker.enqueue([message])
    assert broker.settle(claim_within(broker, ["default"]), DeadLetter(reason))


def test_an_id_that_dies_twice_keeps_both_dead_letters(make: Make) -> None:
    broker = make()
    first = msg(args=(1,))
    _dies(broker, first, "first death")
    _dies(broker, first.replace(args=(2,)), "second death")
    assert [(r.id, r.reason) for r in broker.list_dead()] == [
        (first.id, "second death"),
        (first.id, "first death"),
    ]
    assert broker.retry_dead([first.id]) == 1  # from the latest letter; the first one stays
    again = claim_within(broker, ["default"])
    assert again.message is not None and again.message.args == (2,)
    assert [r.reason for r in broker.list_dead()] == ["first death"]


def test_dead_letter_max_below_one_keeps_the_newest_in_the_settle_and_the_sweep(make: Make) -> None:
    broker = make({"dead_letter_max": 0})
    older, newer = msg(), msg()
    _dies(broker, older, "boom")
    _dies(broker, newer, "boom")
    assert [r.id for r in broker.list_dead()] == [newer.id]
    broker.recover(60.0, 5)  # a new broker's first recover() runs the sweep (dead_trim)
    assert [r.id for r in broker.list_dead()] == [newer.id]


def test_a_dead_nodes_heartbeat_row_goes_once_its_tasks_are_recovered(make: Make) -> None:
    broker = make()
    started = time.time()

    def beat(node: str) -> None:
        broker.heartbeat(WorkerInfo(node, "host", 1, ("default",), 1, started))

    beat("dead-busy")
    beat("dead-idle")
    sent = msg()
    broker.enqueue([sent])
    assert broker.claim(["default"], WorkerRef("dead-busy", 1)) is not None
    deadline = time.monotonic() + WAIT
    while {w.node for w in broker.workers()} != {"alive"}:
        assert time.monotonic() < deadline, f"still listed: {[w.node for w in broker.workers()]}"
        beat("alive")
        broker.recover(0.5, 5)
        broker.wait(["default"], 0.1)  # a short pause between rounds; returns early once requeued
    # the busy node's row went only after its task was requeued
    again = claim_within(broker, ["default"])
    assert again.id == sent.id and again.deliveries == 2


# ----------------------------------------------------------------------------- schema and migrations


@pytest.mark.parametrize(
    ("server_version", "shown"), [(120017, "12.17"), (100000, "10.0"), (90624, "9.6.24"), (80423, "8.4.23")]
)
def test_servers_older_than_13_are_refused_in_one_line(server_version: int, shown: str) -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        migrate.require_server_version(server_version)
    text = str(caught.value)
    assert "\n" not in text
    assert f"version {shown};" in text and "needs 13 or newer" in text


@pytest.mark.parametrize("server_version", [130000, 130021, 150004, 170002])
def test_servers_from_13_on_are_accepted(server_version: int) -> None:
    migrate.require_server_version(server_version)


def test_the_test_server_passes_the_version_check(make: Make) -> None:
    broker = make()
    broker.migrate()  # runs the check on first use
    with broker._connection() as conn:
        assert conn.info.server_version >= 150000
        migrate.require_server_version(conn.info.server_version)


def _catalog(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything that makes two schemas equal, with the schema name taken out."""
    params = (schema,)
    columns = conn.execute(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,"
        " pg_get_expr(d.adbin, d.adrelid), a.attidentity"
        " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
        " WHERE n.nspname = %s AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind = 'r'"
        " ORDER BY 1, 2",
        params,
    ).fetchall()
    relations = conn.execute(
        "SELECT c.relname, c.relkind, coalesce(c.reloptions, '{}') FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s ORDER BY 1",
        params,
    ).fetchall()
    indexes = conn.execute(
        "SELECT indexname, replace(indexdef, %s, 'S') FROM pg_indexes WHERE schemaname = %s ORDER BY 1",
        (f'"{schema}"' if not schema.islower() else schema, schema),
    ).fetchall()
    constraints = conn.execute(
        "SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k"
        " JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s ORDER BY 1, 2",
        params,
    ).fetchall()
    versions = conn.execute(
        sql.SQL("SELECT version, name FROM {}.potatoq_migrations ORDER BY 1").format(sql.Identifier(schema))
    ).fetchall()
    return {
        "columns": columns,
        "relations": relations,
        "indexes": indexes,
        "constraints": constraints,
        "versions": versions,
    }


def test_migrations_in_order_equal_a_fresh_install(pg_url: str) -> None:
    fresh, stepped = f"pq_fresh_{uuid.uuid4().hex[:8]}", f"pq_steps_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            assert migrate.upgrade(conn, statements.Statements(fresh)) == [
                m.number for m in statements.migrations()
            ]
            applied = migrate.upgrade(conn, statements.Statements(stepped), fresh_install=False)
            assert applied == list(range(1, migrate.latest_version() + 1))
            assert migrate.upgrade(conn, statements.Statements(fresh)) == []  # current: nothing to do
            a, b = _catalog(conn, fresh), _catalog(conn, stepped)
        assert a["columns"], "nothing was installed"
        for part in a:
            assert a[part] == b[part], f"{part} differ between the fresh install and the migrations"
    finally:
        drop_schema(pg_url, fresh)
        drop_schema(pg_url, stepped)


def test_migration_0002_keeps_the_dead_letters_and_a_second_death_of_their_id(
    make: Make, pg_url: str
) -> None:
    schema = f"pq_m2_{uuid.uuid4().hex[:8]}"
    stmts = statements.Statements(schema)
    first = statements.migrations()[0]
    with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction():  # a 0001 schema
        conn.execute(stmts["schema_create_schema"].query)
        conn.execute(stmts["schema_create_versions"].query)
        for statement in stmts.migration(first):
            conn.execute(statement.query)
        conn.execute(stmts["schema_record"].query, {"version": first.number, "name": first.name})
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.potatoq_dead (id, queue, reason, payload)"
                " VALUES ('twice', 'default', 'old', '')"
            ).format(sql.Identifier(schema))
        )
    broker = make(schema=schema)  # upgrades on first use
    _dies(broker, Message(id="twice", task="tests.noop", queue="default"), "new")
    assert [(r.id, r.reason) for r in broker.list_dead()] == [("twice", "new"), ("twice", "old")]


def test_many_processes_installing_at_once_install_once(pg_url: str) -> None:
    schema = f"pq_race_{uuid.uuid4().hex[:8]}"
    gate_r, gate_w = os.pipe()
    pids = []
    try:
        for _ in range(6):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.close(gate_w)
                    os.read(gate_r, 1)
                    broker = create_broker(BrokerConfig(url=pg_url, transport_options={"schema": schema}))
                    broker.enqueue([msg("race")])
                    broker.close()
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        os.close(gate_r)
        os.close(gate_w)
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        assert codes == [0] * 6
        broker = create_broker(BrokerConfig(url=pg_url, transport_options={"schema": schema}))
        try:
            [stats] = broker.queue_stats()
            assert stats.waiting == 6
        finally:
            broker.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            versions = conn.execute(
                sql.SQL("SELECT version FROM {}.potatoq_migrations").format(sql.Identifier(schema))
            ).fetchall()
        assert [v for (v,) in versions] == [m.number for m in statements.migrations()]
    finally:
        drop_schema(pg_url, schema)


# ----------------------------------------------------------------------------- round trips


def _round_trips(broker: PostgresBroker, action: Callable[[], object], tmp_path: Any) -> list[str]:
    """The frontend messages ``action`` sent on this thread's connection (libpq trace)."""
    conn = broker._conns.get()
    trace = tmp_path / f"trace-{uuid.uuid4().hex[:6]}.txt"
    with open(trace, "w") as f:
        conn.pgconn.trace(f.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            action()
        finally:
            conn.pgconn.untrace()
    return [line.split("\t")[2] for line in trace.read_text().splitlines() if line.startswith("F\t")]


def test_each_state_change_is_one_round_trip(make: Make, tmp_path: Any) -> None:
    broker = make()
    broker.enqueue([msg("rt")])
    first = claim_within(broker, ["rt"])  # warm up: schema checked, promotion clock set
    assert broker.settle(first, Complete())
    broker._promotion.get().promoted(0)  # no timed promotion is due for a second

    sent = _round_trips(broker, lambda: broker.enqueue([msg("rt")]), tmp_path)
    assert sent.count("Sync") + sent.count("Query") == 1, sent
    holder: list[Delivery | None] = []
    sent = _round_trips(broker, lambda: holder.append(broker.claim(["rt"], WORKER)), tmp_path)
    assert sent.count("Sync") + sent.count("Query") == 1, sent
    delivery = holder[0]
    assert delivery is not None
    broker.enqueue([msg("rt")])
    follow = (msg("rt-next"), msg("rt-next"))
    result_of: list[tuple[bool, Delivery | None]] = []
    sent = _round_trips(
        broker,
        lambda: result_of.append(
            broker.settle_and_claim(delivery, Complete(followups=follow), ["rt"], WORKER)
        ),
        tmp_path,
    )
    assert sent.count("Sync") + sent.count("Query") == 1, sent  # settle + claim, pipelined
    settled, following = result_of[0]
    assert settled and following is not None


def test_a_woken_idle_worker_claims_with_one_statement(make: Make, tmp_path: Any) -> None:
    """The claim after a wake-up is a lone statement (no promotion pipelined in front of it
    until the timed one is due), and its asynchronous commit stays inside its transaction:
    the connection's later settles still wait for the WAL flush."""
    broker = make(poll_interval=QUIET)  # the next timed promotion is 30 s away
    assert broker.claim(["idle"], WORKER) is None  # the first claim promotes (timed) and finds nothing
    broker.enqueue([msg("idle")])
    holder: list[Delivery | None] = []
    sent = _round_trips(broker, lambda: holder.append(broker.claim(["idle"], WORKER)), tmp_path)
    assert sent.count("Execute") == 1 and sent.count("Sync") == 1, sent
    assert holder[0] is not None
    with broker._connection() as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    assert broker.settle(holder[0], Complete())


def test_promotion_notifies_each_queue_once(make: Make) -> None:
    broker = make()
    broker.migrate()
    due = time.time() - 1
    broker.enqueue([msg(f"promo{i % 2}", eta=time.time() + 0.2) for i in range(40)])
    broker.enqueue([msg("promo-later", eta=time.time() + 3600)])
    time.sleep(0.25)
    assert due < time.time()
    [(promoted, notified, next_due)] = broker._run("job_promote", broker._promote_params())
    assert (promoted, notified) == (40, 2)
    assert 3500 < next_due <= 3600  # the hour-away task: an idle worker may sleep until then
    [(promoted, notified, _)] = broker._run("job_promote", broker._promote_params())
    assert (promoted, notified) == (0, 0)


def test_a_terminated_connection_is_replaced(make: Make, pg_url: str) -> None:
    app_name = f"potatoq-kill-{uuid.uuid4().hex[:8]}"
    broker = make(application_name=app_name, poll_interval=QUIET)
    producer = make()
    broker.enqueue([msg("kill")])
    broker.wait(["kill"], 0)
    with monitor(pg_url) as mon:
        mon.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (app_name,),
        )
    for _ in range(3):  # the dead connection is noticed, reported and replaced
        try:
            delivery = broker.claim(["kill"], WORKER)
            break
        except broker.connection_errors:
            continue
    else:
        pytest.fail("the broker never reconnected")
    assert delivery is not None
    broker.wait(["kill"], 0)  # the LISTEN connection reconnects as well
    broker.wait(["kill"], 0)
    timer = threading.Timer(0.1, lambda: producer.enqueue([msg("kill")]))
    timer.start()
    try:
        started = time.monotonic()
        broker.wait(["kill"], WAIT)
        assert time.monotonic() - started < WAIT, "no NOTIFY after the LISTEN connection was replaced"
    finally:
        timer.join()


def test_a_separate_result_backend_gets_the_results(pg_url: str) -> None:
    from potatoq.brokers.base import ResultRecord
    from potatoq.states import SUCCESS

    schema = f"pq_{uuid.uuid4().hex[:12]}"
    results = create_broker(BrokerConfig(url=f"memory://pg-results-{schema}"))
    broker = create_broker(
        BrokerConfig(url=pg_url, transport_options={"schema": schema}, result_backend=results)
    )
    try:
        sent = msg("rb")
        broker.enqueue([sent])
        delivery = broker.claim(["rb"], WORKER)
        assert delivery is not None
        record = ResultRecord(task_id=sent.id, state=SUCCESS, result=3)
        assert broker.settle(delivery, Complete(result=record))
        assert results.get_result(sent.id) == record
        assert broker.get_result(sent.id) == record  # read through to the backend
        with monitor(pg_url) as mon:
            count = mon.execute(
                sql.SQL("SELECT count(*) FROM {}.potatoq_results").format(sql.Identifier(schema))
            ).fetchone()
        assert count == (0,)
    finally:
        broker.close()
        results.close()
        drop_schema(pg_url, schema)


def _failing_results() -> tuple[Broker, threading.Event]:
    """A real (memory) result backend whose writes fail while the event is set."""
    results = create_broker(BrokerConfig(url=f"memory://pg-results-{uuid.uuid4().hex}"))
    store, failing = results.store_result, threading.Event()

    def store_or_fail(record: ResultRecord) -> None:
        if failing.is_set():
            raise ConnectionError("result backend down")
        store(record)

    results.store_result = store_or_fail  # type: ignore[method-assign]
    return results, failing


def test_with_a_separate_result_backend_the_result_is_written_before_the_settle(make: Make) -> None:
    from potatoq.states import SUCCESS

    results, failing = _failing_results()
    broker = make({"result_backend": results})
    sent, following = msg(), msg()
    broker.enqueue([sent, following])
    first = claim_within(broker, ["default"])
    record = ResultRecord(task_id=sent.id, state=SUCCESS, result=1)
    failing.set()
    with pytest.raises(ConnectionError):
        broker.settle(first, Complete(result=record))
    assert [d.id for d in broker.held_by(WORKER)] == [sent.id], "settled without its result"
    with pytest.raises(ConnectionError):
        broker.settle_and_claim(first, Complete(result=record), ["default"], WORKER)
    assert [d.id for d in broker.held_by(WORKER)] == [sent.id]
    failing.clear()
    settled, second = broker.settle_and_claim(first, Complete(result=record), ["default"], WORKER)
    assert settled and second is not None and second.id == following.id
    assert results.get_result(sent.id) == record
    results.close()


def test_with_a_separate_result_backend_recovery_writes_a_lost_tasks_result_first(make: Make) -> None:
    from potatoq.states import FAILURE

    results, failing = _failing_results()
    broker = make({"result_backend": results})
    sent = msg()
    broker.enqueue([sent])
    claim_within(broker, ["default"])  # by a node with no heartbeat: judged by its claim time
    failing.set()
    deadline = time.monotonic() + WAIT
    while True:  # until the claim is older than dead_after and recovery tries to dead-letter it
        try:
            broker.recover(0.2, 1)
        except ConnectionError:
            break
        assert time.monotonic() < deadline, "recovery never reached the lost task"
        broker.wait(["default"], 0.1)
    assert [d.id for d in broker.held_by(WORKER)] == [sent.id], "dead-lettered without its result"
    failing.clear()
    assert broker.recover(0.2, 1).dead == 1
    record = results.get_result(sent.id)
    assert record is not None and record.state == FAILURE
    results.close()


def test_a_user_without_ddl_rights_gets_a_clear_error(pg_url: str) -> None:
    role = f"pq_limited_{uuid.uuid4().hex[:8]}"
    with monitor(pg_url) as mon:
        if not mon.execute(
            "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
        ).fetchone()[0]:
            pytest.skip("the test user can't create roles")
        mon.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        url = psycopg.conninfo.make_conninfo(pg_url, user=role)
        broker = create_broker(BrokerConfig(url=pg_url, transport_options={"schema": f"{role}_s"}))
        broker._conninfo = url  # same server and database, as the limited user
        with pytest.raises(ImproperlyConfigured, match="potatoq migrate"):
            broker.enqueue([msg()])
        broker.close()
    finally:
        with monitor(pg_url) as mon:
            mon.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_token_this_broker_never_issued_is_stale(make: Make) -> None:
    broker = make()
    broker.enqueue([msg("tok")])
    delivery = claim_within(broker, ["tok"])
    forged = Delivery(id=delivery.id, queue="tok", raw=delivery.raw, token="17", deliveries=1, worker=WORKER)
    assert broker.settle(forged, Complete()) is False
    assert broker.settle_and_claim(forged, Complete(), ["tok"], WORKER) == (False, None)
    assert broker.settle(delivery, Complete())


def test_a_single_enqueue_notifies_only_a_new_ready_task(make: Make, pg_url: str) -> None:
    """One message goes to job_enqueue in its scalar parameters: a ready task NOTIFYs its
    queue in the same statement; a duplicate id and a scheduled task don't."""
    broker = make(notify_debounce=0)  # every enqueue may notify inline
    broker.migrate()
    channel = wakeups.channel_name(broker._channel_prefix, "solo")
    first = msg("solo")
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        broker.enqueue([first])
        assert [n.channel for n in listener.notifies(timeout=5, stop_after=1)] == [channel]
        broker.enqueue([first])  # already waiting: nothing inserted, nothing sent
        later = msg("solo", eta=time.time() + 3600)
        broker.enqueue([later])
        marker = msg("solo")  # a NOTIFY that must come next if the two above sent none
        broker.enqueue([marker])
        assert [n.channel for n in listener.notifies(timeout=5, stop_after=1)] == [channel]
        assert list(listener.notifies(timeout=0)) == []
    scheduled = broker.queued_task(later.id)
    assert scheduled is not None and scheduled.state == "scheduled"
    assert broker.claim(["solo"], WORKER).id == first.id  # type: ignore[union-attr]
    assert broker.claim(["solo"], WORKER).id == marker.id  # type: ignore[union-attr]
    assert broker.claim(["solo"], WORKER) is None


def test_a_task_due_soon_is_announced_with_a_due_notify_after_its_commit(make: Make, pg_url: str) -> None:
    """An enqueue due within poll_interval sends a 'due' NOTIFY on its queue (on which idle
    workers learn its due time); inside a caller's transaction only at that commit; a task
    due after the next timed promotion sends none."""
    broker = make(poll_interval=QUIET)
    broker.migrate()
    channel = wakeups.channel_name(broker._channel_prefix, "soon")
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        broker.enqueue([msg("soon", eta=time.time() + QUIET * 10)])  # found by a timed promotion
        broker.enqueue([msg("soon", eta=time.time() + 1)])
        [note] = listener.notifies(timeout=WAIT, stop_after=1)
        assert (note.channel, note.payload) == (channel, wakeups.DUE_PAYLOAD)
        with psycopg.connect(pg_url) as conn:
            broker.enqueue([msg("soon", eta=time.time() + 1)], connection=conn)
            assert list(listener.notifies(timeout=0.2)) == []  # not before the commit
            conn.commit()
        [note] = listener.notifies(timeout=WAIT, stop_after=1)
        assert (note.channel, note.payload) == (channel, wakeups.DUE_PAYLOAD)
        assert list(listener.notifies(timeout=0.2)) == []  # the task due in 300 s sent none
