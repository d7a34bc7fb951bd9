"""What only the SQLite broker promises: pragmas, BEGIN IMMEDIATE, cheap reads, wake-ups
through data_version, fork safety, refusal of unsafe set-ups, migrations."""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from potatoq import states
from potatoq.brokers import create_broker
from potatoq.brokers.base import (
    BrokerConfig,
    ChordJoin,
    Complete,
    DeadLetter,
    Requeue,
    ResultRecord,
    RetryLater,
    WorkerInfo,
    WorkerRef,
)
from potatoq.brokers.sqlite import SQLiteBroker, SQLiteOptions
from potatoq.brokers.sqlite import setup as sqlite_setup
from potatoq.exceptions import ImproperlyConfigured, InvalidName
from potatoq.message import Message, new_id
from tests.factories.sqlite import inject_raw

WORKER = WorkerRef("node-a", 100)


class Clock:
    """An injectable clock: time moves only when the test says so."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "broker.sqlite3"


@pytest.fixture
def make(db_path: Path) -> Iterator[Any]:
    made: list[SQLiteBroker] = []

    def make(**config: Any) -> SQLiteBroker:
        broker = create_broker(BrokerConfig(url=f"sqlite:///{db_path}", **config))
        assert isinstance(broker, SQLiteBroker)
        made.append(broker)
        return broker

    yield make
    for broker in made:
        broker.close()


@pytest.fixture
def broker(make: Any) -> SQLiteBroker:
    b: SQLiteBroker = make()
    return b


def msg(queue: str = "default", **fields: Any) -> Message:
    return Message(id=fields.pop("id", None) or new_id(), task="tests.noop", queue=queue, **fields)


@contextlib.contextmanager
def statements(broker: SQLiteBroker) -> Iterator[list[str]]:
    """Every SQL statement this thread's broker connection runs inside the block."""
    seen: list[str] = []
    conn = broker._conn().conn
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


@contextlib.contextmanager
def write_lock_held(path: Path) -> Iterator[None]:
    """Another connection holding the database's write lock for the block."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def transactions(trace: list[str]) -> list[list[str]]:
    """Group a trace into BEGIN … COMMIT/ROLLBACK blocks; statements outside go alone."""
    groups: list[list[str]] = []
    current: list[str] | None = None
    for sql in trace:
        head = sql.strip().split(None, 1)[0].upper()
        if head == "BEGIN":
            current = [sql]
        elif current is not None:
            current.append(sql)
            if head in {"COMMIT", "ROLLBACK"}:
                groups.append(current)
                current = None
        else:
            groups.append([sql])
    return groups


def is_write(sql: str) -> bool:
    return sql.lstrip().split(None, 1)[0].upper() in {"INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER"}


# ----------------------------------------------------------------------------- configuration


def test_options_default_and_typed() -> None:
    assert SQLiteOptions.from_transport_options({}) == SQLiteOptions()
    assert SQLiteOptions.from_transport_options({"durable": True}).durable is True


def test_unknown_transport_option_is_named() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"unknown SQLite broker_transport_options key 'durabel'"):
        SQLiteOptions.from_transport_options({"durabel": True})


@pytest.mark.parametrize(
    ("name", "value"), [("durable", "yes"), ("busy_timeout", -1), ("busy_timeout", True)]
)
def test_badly_typed_transport_option_is_named(name: str, value: Any) -> None:
    with pytest.raises(ImproperlyConfigured, match=re.escape(f"[{name!r}]")):
        SQLiteOptions.from_transport_options({name: value})


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///", "sqlite:///:memory:", "sqlite:///file::memory:?cache=shared"]
)
def test_in_memory_or_pathless_urls_are_refused(url: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="worker processes"):
        SQLiteBroker(BrokerConfig(url=url))


def test_url_paths_relative_and_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert sqlite_setup.database_path("sqlite:///q.sqlite3") == str(tmp_path / "q.sqlite3")
    assert sqlite_setup.database_path("sqlite:////srv/q.sqlite3") == "/srv/q.sqlite3"
    with pytest.raises(ImproperlyConfigured, match="query string"):
        sqlite_setup.database_path("sqlite:///q.sqlite3?timeout=5")


def test_sqlite_older_than_3_35_is_refused_naming_the_version() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"needs SQLite 3\.35\.0 or newer.*SQLite 3\.34\.1"):
        sqlite_setup.check_sqlite_version((3, 34, 1))
    sqlite_setup.check_sqlite_version((3, 35, 0))
    sqlite_setup.check_sqlite_version(sqlite3.sqlite_version_info)


MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw 0 0
server:/export /mnt/nfs nfs4 rw,vers=4.2 0 0
//nas/share /mnt/smb cifs rw 0 0
/dev/vdb /mnt/nfs/local-disk ext4 rw 0 0
me@host:/data /home/me/remote\\040dir fuse.sshfs rw 0 0
server:/old /mnt/old nfs rw 0 0
"""


@pytest.mark.parametrize(
    ("directory", "expected"),
    [
        ("/home/me", None),
        ("/tmp", None),
        ("/mnt/nfs", "nfs4"),
        ("/mnt/nfs/project/db", "nfs4"),
        ("/mnt/nfs/local-disk/db", None),  # a local disk mounted inside the NFS tree
        ("/mnt/nfsish", None),  # a prefix of the name is not a parent directory
        ("/mnt/smb/x", "cifs"),
        ("/home/me/remote dir/q", "fuse.sshfs"),
        ("/mnt/old", "nfs"),
    ],
)
def test_network_filesystem_detection(directory: str, expected: str | None) -> None:
    assert sqlite_setup.network_filesystem(directory, MOUNTS) == expected


def test_database_on_network_filesystem_is_refused() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"network filesystem \(nfs4\)"):
        sqlite_setup.check_local_filesystem("/mnt/nfs/project/q.sqlite3", MOUNTS)
    sqlite_setup.check_local_filesystem("/mnt/nfs/local-disk/q.sqlite3", MOUNTS)


def test_queue_names_are_validated(broker: SQLiteBroker) -> None:
    with pytest.raises(InvalidName):
        broker.claim(["bad queue; DROP TABLE x"], WORKER)
    with pytest.raises(InvalidName):
        broker.enqueue([msg(queue="'; --")])


# ----------------------------------------------------------------------------- connections


def test_pragmas_wal_normal_busy_timeout_secure_delete_off(broker: SQLiteBroker, db_path: Path) -> None:
    broker.ping()
    conn = broker._conn().conn
    assert conn.isolation_level is None  # autocommit
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
    assert conn.execute("PRAGMA secure_delete").fetchone()[0] == 0
    # the broker checkpoints and trims the WAL itself, after its commits (wal.py)
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == -1
    assert broker.options.journal_size_limit == 64 * 1024 * 1024
    # WAL is persistent: a plain new connection finds the file in WAL mode.
    with contextlib.closing(sqlite3.connect(db_path)) as plain:
        assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_durable_option_selects_synchronous_full(make: Any) -> None:
    broker = make(transport_options={"durable": True, "journal_size_limit": 1 << 20})
    conn = broker._conn().conn
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert broker.options.journal_size_limit == 1 << 20


def test_every_write_runs_in_begin_immediate(broker: SQLiteBroker) -> None:
    info = WorkerInfo(node="node-a", hostname="h", pid=1, queues=("default",), concurrency=1, started_at=0.0)
    cb = msg()
    broker.migrate()
    with statements(broker) as trace:
        broker.enqueue([msg()])
        broker.enqueue([msg() for _ in range(3)])
        broker.enqueue([msg(eta=time.time() + 3600)])
        d = broker.claim(["default"], WORKER)
        assert d is not None
        broker.settle(d, Complete(result=ResultRecord(d.id, states.SUCCESS, 1), followups=(msg(),)))
        d = broker.claim(["default"], WORKER)
        assert d is not None
        broker.settle_and_claim(d, DeadLetter("bad"), ["default"], WORKER)
        broker.heartbeat(info)
        broker.chord_join(ChordJoin("g", 0, 1, b"1", cb))
        broker.claim_fire_time("every-minute", 60.0, msg())
        broker.store_result(ResultRecord("x", states.SUCCESS))
        broker.forget_result("x")
        broker.recover(0.0, 5)
        broker.retry_dead()
        broker.purge(["default"])
        broker.purge_dead()
        broker.forget_worker("node-a")
    groups = transactions(trace)
    writes = [sql for group in groups for sql in group if is_write(sql)]
    assert writes
    for group in groups:
        if any(is_write(sql) for sql in group):
            assert group[0] == "BEGIN IMMEDIATE", group
            assert group[-1] == "COMMIT", group
    assert not broker._conn().conn.in_transaction


def test_batch_enqueue_is_one_transaction(broker: SQLiteBroker) -> None:
    broker.migrate()
    with statements(broker) as trace:
        broker.enqueue([msg() for _ in range(100)])
    assert trace.count("BEGIN IMMEDIATE") == 1
    assert broker.queue_stats()[0].waiting == 100


def test_settle_is_one_transaction_with_result_chord_and_followups(broker: SQLiteBroker) -> None:
    broker.enqueue([msg()])
    d = broker.claim(["default"], WORKER)
    assert d is not None
    join = ChordJoin("grp", 0, 1, b"part", msg(queue="callbacks"))
    with statements(broker) as trace:
        outcome = Complete(
            result=ResultRecord(d.id, states.SUCCESS, 7), followups=(msg(queue="next"),), chord=join
        )
        assert broker.settle(d, outcome)
    assert len(transactions(trace)) == 1
    assert broker.get_result(d.id) == ResultRecord(d.id, states.SUCCESS, 7)
    assert {s.queue: s.waiting for s in broker.queue_stats()} == {"callbacks": 1, "next": 1}


def test_settle_and_claim_is_one_transaction(broker: SQLiteBroker) -> None:
    broker.enqueue([msg(args=(1,)), msg(args=(2,))])
    first = broker.claim(["default"], WORKER)
    assert first is not None
    with statements(broker) as trace:
        settled, second = broker.settle_and_claim(first, Complete(), ["default"], WORKER)
    assert settled
    assert second is not None and second.message is not None and second.message.args == (2,)
    assert [g[0] for g in transactions(trace)].count("BEGIN IMMEDIATE") == 1


def test_stale_settle_and_claim_still_claims(broker: SQLiteBroker) -> None:
    broker.enqueue([msg(id="a"), msg(id="b")])
    stale = broker.claim(["default"], WORKER)
    assert stale is not None
    broker.recover(-1.0, 5)  # every holder counts as dead: "a" is ready again
    again = broker.claim(["default"], WORKER)
    assert again is not None and again.id == "a"
    settled, nxt = broker.settle_and_claim(stale, Complete(), ["default"], WORKER)
    assert not settled
    assert nxt is not None and nxt.id == "b"
    assert broker.settle(again, Complete())


# ----------------------------------------------------------------------------- claims


def test_empty_claim_never_takes_the_write_lock(make: Any, db_path: Path) -> None:
    broker = make(transport_options={"busy_timeout": 10})
    broker.enqueue([msg(eta=time.time() + 86400)])  # far future: not work yet
    with write_lock_held(db_path):
        assert broker.claim(["default"], WORKER) is None  # would fail with "database is locked"
        assert broker.recover(60.0, 5).requeued == 0


def test_new_connection_opens_while_another_holds_the_write_lock(make: Any, db_path: Path) -> None:
    make().migrate()  # the file exists, in WAL mode
    broker = make(transport_options={"busy_timeout": 10})
    with contextlib.closing(sqlite3.connect(db_path, isolation_level=None)) as app_conn:
        app_conn.execute("BEGIN IMMEDIATE")
        broker.enqueue([msg(id="uncommitted")], connection=app_conn)  # a write in progress
        broker.ping()  # opening a WAL file needs no write lock
        assert broker.claim(["default"], WORKER) is None
        app_conn.execute("COMMIT")
    assert broker.claim(["default"], WORKER) is not None


def test_first_opens_of_a_new_file_racing_each_other(tmp_path: Path) -> None:
    """Two connections creating one new file at once: switching it to WAL needs a lock
    the busy timeout doesn't wait for."""
    errors: list[BaseException] = []
    for attempt in range(30):
        config = BrokerConfig(url=f"sqlite:///{tmp_path / f'new-{attempt}.sqlite3'}")
        first, second = SQLiteBroker(config), SQLiteBroker(config)

        def open_second(broker: SQLiteBroker = second) -> None:
            try:
                broker.queue_stats()
            except BaseException as exc:
                errors.append(exc)

        thread = _in_thread(open_second)
        try:
            first.migrate()
        except BaseException as exc:
            errors.append(exc)
        thread.join(60)
        first.close()
        second.close()
    assert errors == []


def test_claim_promotes_due_scheduled_tasks(broker: SQLiteBroker) -> None:
    clock = Clock()
    broker.clock = clock
    broker.enqueue([msg(id="later", eta=clock.now + 100), msg(id="much-later", eta=clock.now + 10**7)])
    assert broker.claim(["default"], WORKER) is None
    [stats] = broker.queue_stats()
    assert (stats.waiting, stats.delayed) == (0, 2)
    clock.now += 101
    d = broker.claim(["default"], WORKER)
    assert d is not None and d.id == "later"
    assert broker.claim(["default"], WORKER) is None


def test_hot_queries_use_the_partial_indexes(broker: SQLiteBroker) -> None:
    broker.migrate()
    conn = broker._conn().conn
    params = {
        "queues": '["default"]',
        "queue": "default",
        "now": 0.0,
        "token": 1,
        "node": "n",
        "pid": 1,
        "limit": 9,
    }

    def plan(name: str) -> str:
        rows = conn.execute("EXPLAIN QUERY PLAN " + sqlite_setup.SQL[name], params).fetchall()
        return " | ".join(str(row[-1]) for row in rows)

    assert "USING INDEX potatoq_jobs_ready" in plan("job_claim")
    assert "potatoq_jobs_scheduled" not in plan("job_claim")  # far-future ETAs stay out of it
    assert "USING INDEX potatoq_jobs_scheduled" in plan("job_promote_due")
    assert "USING INDEX potatoq_jobs_ready" in plan("job_peek")
    assert "USING INDEX potatoq_jobs_scheduled" in plan("job_next_due")


def test_queues_are_tried_in_the_order_given(broker: SQLiteBroker) -> None:
    broker.enqueue([msg(queue="low", id="l", priority=9), msg(queue="high", id="h")])
    d = broker.claim(["high", "low"], WORKER)
    assert d is not None and d.id == "h"


def test_garbage_row_is_delivered_and_counted(broker: SQLiteBroker) -> None:
    raw_id = inject_raw(broker, "default", b"\xff not json")
    d = broker.claim(["default"], WORKER)
    assert d is not None and d.id == raw_id
    assert d.message is None and d.error
    assert d.deliveries == 1
    assert broker.settle(d, DeadLetter(d.error))
    [dead] = broker.list_dead()
    assert dead.raw == b"\xff not json" and dead.task is None


def test_graceful_requeue_does_not_count_a_delivery(broker: SQLiteBroker) -> None:
    broker.enqueue([msg()])
    d = broker.claim(["default"], WORKER)
    assert d is not None and broker.settle(d, Requeue(crashed=False))
    d = broker.claim(["default"], WORKER)
    assert d is not None and d.deliveries == 1
    assert broker.settle(d, Requeue(crashed=True))
    d = broker.claim(["default"], WORKER)
    assert d is not None and d.deliveries == 2


def test_retry_later_reschedules_same_row_with_fresh_count(broker: SQLiteBroker) -> None:
    clock = Clock()
    broker.clock = clock
    m = msg()
    broker.enqueue([m])
    d = broker.claim(["default"], WORKER)
    assert d is not None
    retry = m.replace(retries=1, eta=clock.now + 30)
    assert broker.settle(d, RetryLater(retry, ResultRecord(m.id, states.RETRY)))
    assert broker.claim(["default"], WORKER) is None
    assert broker.get_result(m.id) == ResultRecord(m.id, states.RETRY)
    clock.now += 31
    d = broker.claim(["default"], WORKER)
    assert d is not None and d.message is not None
    assert (d.message.retries, d.deliveries) == (1, 1)


def _claim_all(url: str, out: Any) -> None:
    broker = create_broker(BrokerConfig(url=url))
    got = []
    while (d := broker.claim(["default"], WorkerRef("racer", os.getpid()))) is not None:
        got.append(d.id)
        broker.settle(d, Complete())
    out.put(got)
    broker.close()


def test_concurrent_processes_claim_each_task_once(broker: SQLiteBroker, db_path: Path) -> None:
    ids = [f"t{i}" for i in range(200)]
    broker.enqueue([msg(id=i) for i in ids])
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claim_all, args=(broker.config.url, out)) for _ in range(4)]
    for p in procs:
        p.start()
    claimed = [task_id for _ in procs for task_id in out.get(timeout=60)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert sorted(claimed) == sorted(ids)


# ----------------------------------------------------------------------------- recovery, dead letters, expiry


def test_recover_requeues_then_dead_letters_with_worker_lost(broker: SQLiteBroker) -> None:
    clock = Clock()
    broker.clock = clock
    info = WorkerInfo(node="node-a", hostname="h", pid=1, queues=("default",), concurrency=1, started_at=0.0)
    broker.enqueue([msg(id="job")])
    for delivery in range(1, 3):
        broker.heartbeat(info)
        d = broker.claim(["default"], WORKER)
        assert d is not None and d.deliveries == delivery
        assert broker.recover(60.0, 2).requeued == 0  # heartbeat is fresh
        clock.now += 61
        report = broker.recover(60.0, 2)
        assert (report.requeued, report.dead) == ((1, 0) if delivery == 1 else (0, 1))
    [dead] = broker.list_dead()
    assert dead.id == "job" and dead.reason.startswith("WorkerLostError") and dead.deliveries == 2
    result = broker.get_result("job")
    assert result is not None and result.state == states.FAILURE
    assert result.result["exc_type"] == "WorkerLostError"


def test_claim_without_heartbeat_is_judged_by_claim_time(broker: SQLiteBroker) -> None:
    clock = Clock()
    broker.clock = clock
    broker.enqueue([msg()])
    assert broker.claim(["default"], WORKER) is not None
    assert broker.recover(60.0, 5).requeued == 0
    clock.now += 61
    assert broker.recover(60.0, 5).requeued == 1


def test_dead_letters_capped_by_count_and_age(make: Any) -> None:
    broker = make(dead_letter_max=3, dead_letter_ttl=100.0)
    clock = Clock()
    broker.clock = clock
    for i in range(5):
        broker.enqueue([msg(id=f"d{i}")])
        d = broker.claim(["default"], WORKER)
        broker.settle(d, DeadLetter(f"reason {i}"))
        clock.now += 1
    assert [r.id for r in broker.list_dead()] == ["d4", "d3", "d2"]
    assert [r.id for r in broker.list_dead(limit=1, offset=1)] == ["d3"]
    clock.now += 97.5  # d2 died 100.5 s ago, d3 99.5 s ago
    broker.recover(60.0, 5)
    assert [r.id for r in broker.list_dead()] == ["d4", "d3"]


def test_dead_letter_max_below_one_still_keeps_the_newest(make: Any) -> None:
    broker = make(dead_letter_max=0)  # the floor is 1, as on every broker and in every trim
    broker.enqueue([msg(id="first")])
    broker.settle(broker.claim(["default"], WORKER), DeadLetter("boom"))
    broker.recover(60.0, 5)
    assert [r.id for r in broker.list_dead()] == ["first"]


def test_a_dead_nodes_heartbeat_row_goes_once_its_tasks_are_recovered(broker: SQLiteBroker) -> None:
    clock = Clock()
    broker.clock = clock

    def beat(node: str) -> None:
        broker.heartbeat(WorkerInfo(node, "h", 1, ("default",), 1, 0.0))

    beat("dead-busy")
    beat("dead-idle")
    broker.enqueue([msg(id="held")])
    assert broker.claim(["default"], WorkerRef("dead-busy", 1)) is not None
    clock.now += 61
    beat("alive")
    report = broker.recover(60.0, 5)
    assert report.requeued == 1
    assert [w.node for w in broker.workers()] == ["alive"]
    again = broker.claim(["default"], WORKER)
    assert again is not None and again.id == "held" and again.deliveries == 2


class FailingResults:
    """A real (memory) result backend whose writes fail while ``failing`` is set."""

    def __init__(self, name: str) -> None:
        self.backend = create_broker(BrokerConfig(url=f"memory://{name}"))
        self.failing = False
        self.store = self.backend.store_result
        self.backend.store_result = self._store  # type: ignore[method-assign]

    def _store(self, record: ResultRecord) -> None:
        if self.failing:
            raise ConnectionError("result backend down")
        self.store(record)


def test_with_a_separate_result_backend_the_result_is_written_before_the_settle(make: Any) -> None:
    results = FailingResults(f"sqlite-results-{new_id()}")
    broker = make(result_backend=results.backend)
    broker.enqueue([msg(id="t1"), msg(id="t2")])
    first = broker.claim(["default"], WORKER)
    results.failing = True
    with pytest.raises(ConnectionError):
        broker.settle(first, Complete(result=ResultRecord("t1", states.SUCCESS, 1)))
    assert [d.id for d in broker.held_by(WORKER)] == ["t1"], "settled without its result"
    with pytest.raises(ConnectionError):
        broker.settle_and_claim(
            first, Complete(result=ResultRecord("t1", states.SUCCESS, 1)), ["default"], WORKER
        )
    assert [d.id for d in broker.held_by(WORKER)] == ["t1"]
    results.failing = False
    settled, second = broker.settle_and_claim(
        first, Complete(result=ResultRecord("t1", states.SUCCESS, 1)), ["default"], WORKER
    )
    assert settled and second is not None and second.id == "t2"
    assert results.backend.get_result("t1") == ResultRecord("t1", states.SUCCESS, 1)
    results.backend.close()


def test_with_a_separate_result_backend_recovery_writes_a_lost_tasks_result_first(make: Any) -> None:
    results = FailingResults(f"sqlite-results-{new_id()}")
    broker = make(result_backend=results.backend)
    clock = Clock()
    broker.clock = clock
    broker.enqueue([msg(id="lost")])
    assert broker.claim(["default"], WORKER) is not None
    clock.now += 61
    results.failing = True
    with pytest.raises(ConnectionError):
        broker.recover(60.0, 1)
    assert [d.id for d in broker.held_by(WORKER)] == ["lost"], "dead-lettered without its result"
    results.failing = False
    assert broker.recover(60.0, 1).dead == 1
    record = results.backend.get_result("lost")
    assert record is not None and record.state == states.FAILURE
    assert [r.id for r in broker.list_dead()] == ["lost"]
    results.backend.close()


def test_results_expire_and_are_removed_lazily(make: Any, db_path: Path) -> None:
    broker = make(result_expires=10.0)
    clock = Clock()
    broker.clock = clock
    broker.store_result(ResultRecord("r", states.SUCCESS, 1))
    broker.chord_join(ChordJoin("g", 0, 2, b"x", msg()))
    assert broker.get_result("r") is not None and broker.chord_parts("g") == [b"x"]
    clock.now += 11
    assert broker.get_result("r") is None and broker.chord_parts("g") == []
    broker.recover(60.0, 5)
    with contextlib.closing(sqlite3.connect(db_path)) as plain:
        counts = [
            plain.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("potatoq_results", "potatoq_chords", "potatoq_chord_parts")
        ]
    assert counts == [0, 0, 0]


def test_transactional_enqueue_through_callers_connection(broker: SQLiteBroker, db_path: Path) -> None:
    broker.migrate()
    with contextlib.closing(sqlite3.connect(db_path)) as app_conn:
        broker.enqueue([msg(id="rolled-back")], connection=app_conn)
        app_conn.rollback()
        broker.enqueue([msg(id="committed")], connection=app_conn)
        app_conn.commit()
    d = broker.claim(["default"], WORKER)
    assert d is not None and d.id == "committed"
    assert broker.claim(["default"], WORKER) is None


# ----------------------------------------------------------------------------- wake-ups


def _in_thread(fn: Any) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def test_wait_returns_when_another_connection_commits(make: Any) -> None:
    waiter, producer = make(), make()
    waiter.migrate()
    started = threading.Event()

    def wait() -> None:
        assert waiter.claim(["default"], WORKER) is None  # as a worker does before waiting
        started.set()
        waiter.wait(["default"], 120.0)

    thread = _in_thread(wait)
    started.wait()
    producer.enqueue([msg()])
    thread.join(60)
    assert not thread.is_alive()


def test_commit_between_empty_claim_and_wait_is_not_missed(make: Any) -> None:
    waiter, producer = make(), make()
    done = threading.Event()

    def run() -> None:
        assert waiter.claim(["default"], WORKER) is None
        producer.enqueue([msg()])  # lands before wait() starts
        waiter.wait(["default"], 120.0)
        done.set()

    thread = _in_thread(run)
    thread.join(60)
    assert done.is_set()


def test_wait_wakes_when_a_scheduled_task_falls_due(broker: SQLiteBroker) -> None:
    broker.enqueue([msg(eta=time.time() + 0.05)])
    thread = _in_thread(lambda: broker.wait(["default"], 120.0))
    thread.join(60)
    assert not thread.is_alive()


def test_interrupt_wakes_a_waiting_thread(broker: SQLiteBroker) -> None:
    broker.migrate()
    started = threading.Event()

    def wait() -> None:
        started.set()
        broker.wait(["default"], 120.0)

    thread = _in_thread(wait)
    started.wait()
    broker.interrupt()
    thread.join(60)
    assert not thread.is_alive()


def test_wait_for_result_wakes_on_commit(make: Any) -> None:
    reader, writer = make(), make()
    reader.migrate()
    found: list[ResultRecord | None] = []
    started = threading.Event()

    def wait() -> None:
        started.set()
        found.append(reader.wait_for_result("job", 120.0))

    thread = _in_thread(wait)
    started.wait()
    writer.store_result(ResultRecord("job", states.STARTED))
    writer.store_result(ResultRecord("job", states.SUCCESS, 5))
    thread.join(60)
    assert found == [ResultRecord("job", states.SUCCESS, 5)]


# ----------------------------------------------------------------------------- fork safety


def test_fork_never_touches_the_parents_connection(broker: SQLiteBroker, tmp_path: Path) -> None:
    broker.enqueue([msg(id="before-fork")])
    parent_conn = broker._conn().conn
    log = tmp_path / "used-by.log"

    def record(sql: str) -> None:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")

    parent_conn.set_trace_callback(record)
    pid = os.fork()
    if pid == 0:  # child: use the broker, then drop it and collect garbage
        code = 1
        try:
            import gc

            broker.enqueue([msg(id="from-child")])
            d = broker.claim(["default"], WorkerRef("child", os.getpid()))
            ok = d is not None and broker.settle(d, Complete())
            child_conn = broker._conn().conn
            broker.close()
            del d
            gc.collect()
            code = 0 if ok and child_conn is not parent_conn else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    parent_conn.set_trace_callback(None)
    users = set(log.read_text().split()) if log.exists() else set()
    assert users <= {str(os.getpid())}  # the child never ran a statement on it
    # the parent's connection still works, and the database is consistent
    assert broker._conn().conn is parent_conn
    assert parent_conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    remaining = broker.claim(["default"], WORKER)
    assert remaining is not None and remaining.id == "from-child"
    assert broker.settle(remaining, Complete())
    assert broker.queue_stats() == []


# ----------------------------------------------------------------------------- schema


def _schema(conn: sqlite3.Connection) -> dict[str, Any]:
    """The structure of the potatoq tables: columns, indexes (with their WHERE), rowid-ness."""

    def normal(sql: str) -> str:
        sql = re.sub(r"--[^\n]*", "", sql)
        return re.sub(r"\s+", " ", sql).strip()

    found: dict[str, Any] = {}
    for kind, name, table, sql in conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name LIKE 'potatoq%' ORDER BY name"
    ):
        if kind == "table":
            found[name] = {
                "columns": conn.execute(f"PRAGMA table_xinfo({name})").fetchall(),
                "without_rowid": "WITHOUT ROWID" in sql.upper(),
            }
        elif kind == "index":
            found[name] = {"table": table, "sql": normal(sql) if sql else None}
    return found


def test_migrations_in_order_equal_a_fresh_install(tmp_path: Path) -> None:
    fresh = sqlite3.connect(tmp_path / "fresh.sqlite3", isolation_level=None)
    migrated = sqlite3.connect(tmp_path / "migrated.sqlite3", isolation_level=None)
    fresh.execute(sqlite_setup.SQL["schema_create_migrations"])
    sqlite_setup.install_schema(fresh, 0.0)
    migrated.execute(sqlite_setup.SQL["schema_create_migrations"])
    # apply_migrations(start) runs start + 1 … latest, as an upgrade from ``start`` does
    sqlite_setup.apply_migrations(migrated, 0, 0.0)
    migrated_version = migrated.execute(sqlite_setup.SQL["schema_version"]).fetchone()[0]
    assert migrated_version == sqlite_setup.LATEST_VERSION
    assert _schema(fresh) == _schema(migrated)
    assert (
        fresh.execute("SELECT version, name FROM potatoq_migrations").fetchall()
        == migrated.execute("SELECT version, name FROM potatoq_migrations").fetchall()
    )
    fresh.close()
    migrated.close()


@pytest.mark.parametrize("installed", range(1, sqlite_setup.LATEST_VERSION))
def test_an_older_schema_is_upgraded_to_a_fresh_install(tmp_path: Path, installed: int) -> None:
    """A database made by an older potatoq (migrations 1 .. installed) gets the rest."""
    fresh = sqlite3.connect(tmp_path / "fresh.sqlite3", isolation_level=None)
    fresh.execute(sqlite_setup.SQL["schema_create_migrations"])
    sqlite_setup.install_schema(fresh, 0.0)
    old = sqlite3.connect(tmp_path / "old.sqlite3", isolation_level=None)
    old.execute(sqlite_setup.SQL["schema_create_migrations"])
    for migration in sqlite_setup._MIGRATIONS[:installed]:
        for _name, sql in migration.statements:
            old.execute(sql)
        old.execute(
            sqlite_setup.SQL["schema_record_migration"],
            {"version": migration.number, "name": migration.name, "now": 0.0},
        )
    sqlite_setup.apply_migrations(old, installed, 0.0)
    assert _schema(fresh) == _schema(old)
    fresh.close()
    old.close()


def test_schema_is_created_once_and_newer_schemas_are_refused(make: Any, db_path: Path) -> None:
    make().migrate()
    make().migrate()  # already current: nothing to do
    with contextlib.closing(sqlite3.connect(db_path, isolation_level=None)) as plain:
        versions = plain.execute("SELECT version FROM potatoq_migrations").fetchall()
        assert versions == [(v,) for v in range(1, sqlite_setup.LATEST_VERSION + 1)]
        plain.execute("INSERT INTO potatoq_migrations VALUES (999, 'future', 0)")
    with pytest.raises(ImproperlyConfigured, match="newer than this potatoq"):
        make().migrate()


def test_options_dataclass_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SQLiteOptions().durable = True  # type: ignore[misc]
