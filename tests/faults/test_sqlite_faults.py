"""SQLite under hostile conditions: processes SIGKILLed mid-write, and a full disk.

* Writers (``sqlite_writer.py``: big batch enqueues, then claim-and-settle loops with results
  and follow-ups) are SIGKILLed at random moments. Afterwards ``PRAGMA integrity_check`` is
  ``ok`` and the contract's invariants hold: each batch is there whole or not at all, each
  settled task has its result and both follow-ups and is gone from the queue, and every
  task the killed settler held comes back through recovery.
* On a small tmpfs the database fills the disk: enqueue fails with an error that says the
  disk is full (not a corrupt database), the database still passes ``integrity_check`` with
  everything committed before intact, and once space is freed it works as before.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from potatoq.brokers.base import BrokerConfig, Complete, WorkerRef
from potatoq.brokers.sqlite import SQLiteBroker
from potatoq.exceptions import OperationalError
from potatoq.message import Message
from tests import services

from .harness import ROOT, report, sized

BATCH = 2000


def _integrity(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]


def _count(path: Path, sql: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute(sql).fetchone()[0])


def _run_and_kill(mode: str, path: Path, rng: random.Random) -> bool:
    """Start a writer, SIGKILL it at a random moment after its first commit; True if killed mid-run."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.sqlite_writer", mode, str(path), str(BATCH)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"started\n", "the writer died before its first commit"
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(rng.uniform(0.0, 0.3))
        if proc.poll() is not None:
            return False  # ran out of work first
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        return True
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.slow
def test_writers_killed_mid_write_leave_a_consistent_database(tmp_path: Path) -> None:
    path = tmp_path / "broker.sqlite3"
    SQLiteBroker(BrokerConfig(url=f"sqlite:///{path}")).migrate()
    rng = random.Random()
    rounds = sized(3, 6)
    kills = 0
    for mode in ["enqueue"] * rounds + ["settle"] * rounds:
        kills += _run_and_kill(mode, path, rng)

    integrity = _integrity(path)
    waiting = _count(path, "SELECT count(*) FROM potatoq_jobs WHERE queue = 'bulk'")
    held = _count(path, "SELECT count(*) FROM potatoq_jobs WHERE queue = 'bulk' AND state = 2")
    results = _count(path, "SELECT count(*) FROM potatoq_results")
    followups = _count(path, "SELECT count(*) FROM potatoq_jobs WHERE queue = 'next'")
    stray = _count(
        path, "SELECT count(*) FROM potatoq_results WHERE task_id IN (SELECT id FROM potatoq_jobs)"
    )
    report(
        "sqlite killed mid-write",
        "sqlite",
        kills=kills,
        integrity=integrity[0],
        tasks_enqueued=waiting + results,
        settled=results,
        held_by_killed_settler=held,
    )
    assert integrity == ["ok"]
    assert kills, "every writer finished before it could be killed"
    assert (waiting + results) % BATCH == 0, "a batch enqueue was half applied"
    assert followups == 2 * results, "a settle wrote its result without its follow-ups (or the reverse)"
    assert stray == 0, "a task with a stored result is still queued"
    assert held <= rounds, "more tasks held than settlers killed"

    broker = SQLiteBroker(BrokerConfig(url=f"sqlite:///{path}"))
    try:
        assert broker.recover(0.0, 100).requeued == held  # the killed settlers' claims come back
        worker = WorkerRef("checker", os.getpid())
        seen = 0
        while (delivery := broker.claim(["bulk"], worker)) is not None:
            assert broker.settle(delivery, Complete())
            seen += 1
        assert seen == waiting
        broker.enqueue([Message(id="after", task="faults.add", args=(1, 2), queue="after")])
        again = broker.claim(["after"], worker)
        assert again is not None and again.id == "after" and broker.settle(again, Complete())
    finally:
        broker.close()
    assert _integrity(path) == ["ok"]


@pytest.fixture
def small_disk(tmp_path: Path):
    """An 8 MiB tmpfs of our own, unmounted afterwards."""
    mountpoint = tmp_path / "small-disk"
    mountpoint.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mountpoint)],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        reason = f"can't mount a tmpfs here: {done.stderr.strip() or done.returncode}"
        if services.IN_CI:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


@pytest.mark.slow
def test_full_disk_gives_a_clear_error_and_no_corruption(small_disk: Path) -> None:
    path = small_disk / "broker.sqlite3"
    ballast = small_disk / "ballast"
    # Space to free later. WAL mode needs room for up to wal_autocheckpoint (1000) pages,
    # about 4 MiB, of log beside the database; freeing less would only fill the disk again.
    ballast.write_bytes(b"\0" * 5 * 1024 * 1024)
    broker = SQLiteBroker(BrokerConfig(url=f"sqlite:///{path}"))
    committed = 0
    error: Exception | None = None
    try:
        for _ in range(1000):  # 3 MiB can't hold 1000 batches of 50 KiB
            batch = [
                Message(id=str(uuid.uuid4()), task="faults.add", args=(i, "y" * 1000), queue="full")
                for i in range(50)
            ]
            try:
                broker.enqueue(batch)
            except Exception as exc:
                error = exc
                break
            committed += len(batch)
        assert error is not None, "the disk never filled up"
        assert isinstance(error, OperationalError), repr(error)
        assert "full" in str(error), str(error)
        assert str(path) in str(error), "the error should name the database"

        broker.close()
        # What a producer sees: .delay() retries for broker_connection_timeout, then raises
        # OperationalError carrying SQLite's reason.
        from tests.faults import proj

        saved = dict(proj.app.conf)
        proj.app.close()
        proj.app.conf.update(broker_url=f"sqlite:///{path}", broker_connection_timeout=0.5)
        try:
            with pytest.raises(OperationalError, match="disk is full") as raised:
                proj.add.delay(1, "z" * 4_000_000)  # more than the whole disk has left
        finally:
            proj.app.close()
            proj.app.conf.update(saved)
        producer_error = str(raised.value)
        integrity = _integrity(path)
        assert integrity == ["ok"]
        assert _count(path, "SELECT count(*) FROM potatoq_jobs WHERE queue = 'full'") == committed

        ballast.unlink()  # free space: the same database works again
        broker = SQLiteBroker(BrokerConfig(url=f"sqlite:///{path}"))
        broker.enqueue([Message(id="after-full", task="faults.add", args=(1, 2), queue="after")])
        worker = WorkerRef("checker", os.getpid())
        delivery = broker.claim(["after"], worker)
        assert delivery is not None and delivery.id == "after-full"
        assert broker.settle(delivery, Complete())
        drained = 0
        while (delivery := broker.claim(["full"], worker)) is not None:
            assert broker.settle(delivery, Complete())
            drained += 1
        assert drained == committed
    finally:
        broker.close()
    report(
        "sqlite full disk",
        "sqlite",
        disk="8 MiB tmpfs, 5 MiB of it ballast",
        committed_before_full=committed,
        error=str(error)[:160],
        producer_error=producer_error[:200],
        integrity=integrity[0],
        usable_after_freeing_space=True,
    )
    assert _integrity(path) == ["ok"]
