"""The SQLite broker checkpoints the WAL itself after a commit, outside the timed write-lock
hold, and cuts an oversized WAL file in short steps (potatoq/brokers/sqlite/wal.py)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig
from potatoq.brokers.sqlite import SQLiteBroker
from potatoq.brokers.sqlite import wal as sqlite_wal
from potatoq.brokers.sqlite.holds import WriteHolds
from potatoq.message import Message, new_id


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "b.sqlite3"


def _broker(path: Path, **options: object) -> SQLiteBroker:
    broker = create_broker(BrokerConfig(url=f"sqlite:///{path}", transport_options=options))
    assert isinstance(broker, SQLiteBroker)
    broker.migrate()
    return broker


@contextlib.contextmanager
def _other(path: Path, *, autocheckpoint: bool) -> Iterator[sqlite3.Connection]:
    """Another program's connection to the same file."""
    conn = sqlite3.connect(path, isolation_level=None)
    if not autocheckpoint:
        conn.execute("PRAGMA wal_autocheckpoint = 0")
    try:
        yield conn
    finally:
        conn.close()


def _bulk(conn: sqlite3.Connection, rows: int) -> None:
    """One transaction writing about ``rows`` pages (a result of 3 KB each)."""
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :k - 1)"
        " INSERT INTO potatoq_results (task_id, state, payload, expires_at)"
        " SELECT 'bulk-' || i, 'SUCCESS', randomblob(3000), 1e12 FROM n",
        {"k": rows},
    )


def _enqueue(broker: SQLiteBroker) -> None:
    broker.enqueue([Message(id=new_id(), task="tests.noop", queue="q")])


def _enqueue_40(broker: SQLiteBroker) -> None:
    """One commit of ~20 WAL frames."""
    broker.enqueue([Message(id=new_id(), task="tests.noop", queue="q", args=("x" * 200,)) for _ in range(40)])


def _wal_size(path: Path) -> int:
    return os.path.getsize(f"{path}-wal")


def test_a_big_wal_is_checkpointed_after_the_next_commit_not_inside_its_timed_hold(path: Path) -> None:
    broker = _broker(path, slow_write_ms=60_000)
    with _other(path, autocheckpoint=False) as other:
        _bulk(other, 3000)  # ~3,000 frames nobody checkpointed: a bulk load by another program
    broker.write_holds = WriteHolds(60_000)  # the enqueue below makes the first record
    seen: list[tuple[str, bool]] = []

    def traced(statement: str) -> None:
        if "wal_checkpoint" in statement:  # SQLite's trace: the statement is about to run
            with _other(path, autocheckpoint=False) as probe:
                probe.execute("PRAGMA busy_timeout = 0")
                probe.execute("BEGIN IMMEDIATE")  # the write lock is free: this doesn't wait
                probe.execute("ROLLBACK")
            seen.append((broker.write_holds.longest.what, True))

    broker._conn().conn.set_trace_callback(traced)
    _enqueue(broker)
    broker._conn().conn.set_trace_callback(None)

    # one checkpoint, started once the enqueue's hold had been timed and recorded, while
    # another connection could take the write lock
    assert seen == [("enqueue", True)]
    checkpoint = broker.checkpoints.longest
    assert broker.checkpoints.count == 1 and checkpoint.after == "enqueue"
    assert checkpoint.frames >= 3000 and checkpoint.checkpointed == checkpoint.frames
    assert broker._conn().conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0


def test_small_commits_keep_the_wal_near_the_checkpoint_threshold(path: Path) -> None:
    broker = _broker(path)
    page = 4096 + 24
    largest = 0
    for _ in range(150):  # ~3,000 frames in all, three thresholds' worth
        _enqueue_40(broker)
        largest = max(largest, _wal_size(path))
    assert broker.checkpoints.count >= 2
    assert largest < 2 * sqlite_wal.CHECKPOINT_FRAMES * page  # without checkpoints: ~12 MB


def test_a_reader_that_stops_the_checkpoint_doesnt_make_every_commit_retry(path: Path) -> None:
    broker = _broker(path)
    with _other(path, autocheckpoint=False) as reader:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM potatoq_jobs").fetchone()  # holds its snapshot
        for _ in range(150):
            _enqueue_40(broker)
        reader.execute("COMMIT")
    # a checkpoint per CHECKPOINT_FRAMES frames written, as with nobody reading; not one per commit
    assert 1 <= broker.checkpoints.count <= 6
    assert broker.checkpoints.longest.checkpointed < broker.checkpoints.longest.frames


def test_an_oversized_wal_file_is_cut_to_journal_size_limit_in_short_steps(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = 1 << 20
    monkeypatch.setattr(sqlite_wal, "TRIM_STEP", step)
    limit = 1 << 20
    broker = _broker(path, journal_size_limit=limit)
    with _other(path, autocheckpoint=False) as other:
        _bulk(other, 1500)  # a WAL file of ~6 MB
    sizes = [_wal_size(path)]
    assert sizes[0] > limit + 4 * step
    for _ in range(50):
        _enqueue(broker)
        sizes.append(_wal_size(path))
        if sizes[-1] <= limit:
            break
    assert sizes[-1] <= limit, sizes  # journal_size_limit still applies
    cuts = [before - after for before, after in zip(sizes, sizes[1:], strict=False) if after < before]
    assert len(cuts) >= 4 and max(cuts) <= step, sizes  # never the whole excess in one commit
