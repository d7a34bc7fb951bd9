"""SQLite at scale: housekeeping of a large backlog in short write transactions."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, Complete, WorkerRef
from potatoq.brokers.limits import RATE_HEADER
from potatoq.brokers.sqlite import SQLiteBroker
from potatoq.brokers.sqlite.broker import HOUSEKEEPING_BATCH, PROMOTE_BATCH
from potatoq.message import Message, new_id


def test_an_expired_backlog_goes_in_one_recover_call_one_short_transaction_per_batch(tmp_path: Path) -> None:
    path = tmp_path / "broker.sqlite3"
    broker = create_broker(BrokerConfig(url=f"sqlite:///{path}"))
    assert isinstance(broker, SQLiteBroker)
    broker.migrate()
    expired = 2 * HOUSEKEEPING_BATCH + 7
    now = time.time()
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO potatoq_results (task_id, state, payload, expires_at)"
            " VALUES (?, 'SUCCESS', x'00', ?)",
            [(f"old-{i}", now - 60) for i in range(expired)] + [(f"live-{i}", now + 3600) for i in range(5)],
        )
        conn.executemany(
            "INSERT INTO potatoq_chords (group_id, size, expires_at) VALUES (?, 2, ?)",
            [(f"g-{i}", now - 60) for i in range(HOUSEKEEPING_BATCH + 1)],
        )
        conn.executemany(
            "INSERT INTO potatoq_chord_parts (group_id, idx, value) VALUES (?, 0, x'00')",
            [(f"g-{i}",) for i in range(HOUSEKEEPING_BATCH + 1)],
        )
    conn.close()
    statements: list[str] = []
    broker._conn().conn.set_trace_callback(statements.append)
    try:
        broker.recover(60.0, 5)
    finally:
        broker._conn().conn.set_trace_callback(None)
        broker.close()
    with sqlite3.connect(path) as conn:
        left = conn.execute("SELECT task_id FROM potatoq_results ORDER BY task_id").fetchall()
        chords = conn.execute("SELECT count(*) FROM potatoq_chords").fetchone()
        parts = conn.execute("SELECT count(*) FROM potatoq_chord_parts").fetchone()
    conn.close()
    assert [r[0] for r in left] == [f"live-{i}" for i in range(5)]
    assert chords == (0,) and parts == (0,)
    # results in three batches, chords in two: each its own write transaction
    assert sum(s.startswith("BEGIN IMMEDIATE") for s in statements) >= 3 + 2, statements


def test_an_idle_wait_outlasts_commits_to_other_queues(tmp_path: Path) -> None:
    """Commits elsewhere cost the waiter one cheap read each; it returns for its own queue."""
    url = f"sqlite:///{tmp_path / 'broker.sqlite3'}"
    waiter = create_broker(BrokerConfig(url=url))
    other = create_broker(BrokerConfig(url=url))
    assert isinstance(waiter, SQLiteBroker) and isinstance(other, SQLiteBroker)
    looks = threading.Semaphore(0)
    read = waiter._read

    def counting_read(name: str, params: Any = None) -> list[Any]:
        if name == "job_peek":
            looks.release()
        return read(name, params)

    waiter._read = counting_read  # type: ignore[method-assign]
    returned = threading.Event()

    def wait() -> None:
        waiter.wait(["mine"], 60.0)
        returned.set()

    thread = threading.Thread(target=wait)
    thread.start()
    try:
        assert looks.acquire(timeout=20)  # the first look, before sleeping
        for _ in range(5):
            other.enqueue([Message(id=new_id(), task="tests.noop", queue="elsewhere")])
            # the waiter either looks again (and goes on waiting) or, without the fix, returns
            deadline = time.monotonic() + 20
            while not looks.acquire(timeout=0.05) and not returned.is_set():
                assert time.monotonic() < deadline, "the waiter never noticed the commit"
            assert not returned.is_set(), "a commit to another queue ended the wait"
        other.enqueue([Message(id=new_id(), task="tests.noop", queue="mine")])
        assert returned.wait(20)
    finally:
        waiter.interrupt()
        thread.join(20)
        waiter.close()
        other.close()


def test_a_due_backlog_is_promoted_a_batch_per_claim_earliest_first(tmp_path: Path) -> None:
    path = tmp_path / "broker.sqlite3"
    broker = create_broker(BrokerConfig(url=f"sqlite:///{path}"))
    assert isinstance(broker, SQLiteBroker)
    broker.migrate()
    due = 2 * PROMOTE_BATCH + 3
    now = time.time()
    messages = [Message(id=f"due-{i:05d}", task="tests.noop", queue="q") for i in range(due)]
    with sqlite3.connect(path) as conn:  # a mass ETA that fell due while nothing ran
        conn.executemany(
            "INSERT INTO potatoq_jobs (id, queue, state, run_at, payload) VALUES (?, 'q', 0, ?, ?)",
            [(m.id, now - 3600 + i, m.encode()) for i, m in enumerate(messages)],
        )
    conn.close()
    try:
        first = broker.claim(["q"], WorkerRef("node", 1))
        assert first is not None and first.id == "due-00000"
        with sqlite3.connect(path) as conn:
            states = dict(conn.execute("SELECT state, count(*) FROM potatoq_jobs GROUP BY state").fetchall())
        conn.close()
        assert states == {0: due - PROMOTE_BATCH, 1: PROMOTE_BATCH - 1, 2: 1}
        claimed = [first.id]
        while (delivery := broker.claim(["q"], WorkerRef("node", 1))) is not None:
            claimed.append(delivery.id)
        assert claimed == [m.id for m in messages]  # every one, in due order
    finally:
        broker.close()


class TracedClaims:
    """A SQLite broker whose claims are traced: :meth:`runs` claims (and settles) once and
    counts the statements run that contain ``marker``."""

    def __init__(self, path: Path) -> None:
        broker = create_broker(BrokerConfig(url=f"sqlite:///{path}"))
        assert isinstance(broker, SQLiteBroker)
        self.broker = broker
        self.statements: list[str] = []
        broker._conn().conn.set_trace_callback(self.statements.append)

    def runs(self, marker: str) -> int:
        self.statements.clear()
        delivery = self.broker.claim(["q"], WorkerRef("node", os.getpid()))
        if delivery is not None:
            assert self.broker.settle(delivery, Complete())
        return sum(marker in statement for statement in self.statements)

    def close(self) -> None:
        self.broker._conn().conn.set_trace_callback(None)
        self.broker.close()


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[TracedClaims]:
    claims = TracedClaims(tmp_path / "broker.sqlite3")
    yield claims
    claims.close()


RATE_MOVE = "rate_wait = 1, run_at = w.at"  # in rate_defer only
DUE_MOVE = "SET state = 1, seq = due.new_seq"  # in job_promote_due only


def test_a_claim_moves_rate_limited_tasks_only_while_a_key_waits_for_its_token(traced: TracedClaims) -> None:
    # rate_defer (an UPDATE with a materialized window) ran in every claim; while every key
    # has a token, or no task has a rate, a one-row probe decides there is nothing to move.
    traced.broker.enqueue([Message(id=new_id(), task="t", queue="q")])
    assert traced.runs(RATE_MOVE) == 0  # no rate anywhere
    rated = {RATE_HEADER: ["k", 1 / 60, 1]}  # one token a minute
    traced.broker.enqueue([Message(id=new_id(), task="t", queue="q", headers=rated) for _ in range(3)])
    assert traced.runs(RATE_MOVE) == 0  # the first rated task finds its key's token
    # the claim that took it left key k without a token: the next claim moves its tasks
    assert traced.runs(RATE_MOVE) > 0
    traced.broker.enqueue([Message(id=new_id(), task="t", queue="q")])
    assert traced.runs(RATE_MOVE) > 0  # k still waits (a minute): probed and moved again


def test_a_claim_promotes_scheduled_tasks_only_when_one_is_due(traced: TracedClaims, tmp_path: Path) -> None:
    # job_promote_due (an UPDATE with a materialized window) ran in every claim; a probe of
    # the scheduled index now decides whether anything is due first.
    later = time.time() + 3600
    traced.broker.enqueue(
        [Message(id=new_id(), task="t", queue="q", eta=later), Message(id=new_id(), task="t", queue="q")]
    )
    assert traced.runs(DUE_MOVE) == 0  # one scheduled, not due: nothing to promote
    # an hour passes for the scheduled one (its due time moved, not the clock)
    with sqlite3.connect(tmp_path / "broker.sqlite3") as other:
        other.execute("UPDATE potatoq_jobs SET run_at = ? WHERE state = 0", (time.time() - 1,))
    other.close()
    assert traced.runs(DUE_MOVE) > 0  # due: promoted, then claimed
