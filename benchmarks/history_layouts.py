"""What a task-history record costs to store on SQLite, by table layout (issue 31's 5 %):

    python -m benchmarks.history_layouts [--records 100000] [--batch 128] [--runs 5]

A no-op task costs a SQLite worker about 330 µs of CPU, so 5 % is about 16 µs per record,
building it included. This times, in one process on a file in a temporary directory (WAL,
``synchronous=NORMAL``, as the broker opens it), the CPU (``time.process_time``) of
writing ``--records`` records in transactions of ``--batch``, each layout alternating
with the others run by run:

* **rows**: today's ``potatoq_history``, one row per record, in a file the broker's own
  ``migrate`` made, written with ``history_insert``;
* **batched**: a prototype of the alternative: one row per batch holding its records as
  one JSON array, the distinct names, states, queues and groups of each batch in a keys
  table (``(kind, value, batch)``, one entry per batch and value: a filtered page walks
  the batches that hold its value and filters their records in Python), and a task index
  with one entry per record (``(task_id, batch)``: the task page);
* **table only**: ``potatoq_history`` with no index but its primary key (the floor of a
  row per record);
* **build**: what the worker does in Python before any of them: the record of each settle
  (``history.row_for_settle`` of a decoded delivery, a stored result of ``None``: the
  row itself), and per batch its rollups (``history_rollup.rollups_of``), as the SQLite
  broker makes them.

The records are a benchmark worker's, made by ``history.row_for_settle`` as it makes them:
UUID7 task ids, three task names, one queue, one state, sent as groups of 100, a short
argument preview. Reported: the median
µs per record of each layout, and the file's size after the last run.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from potatoq import states
from potatoq.brokers.history import HistoryRow, HistorySettings, row_for_settle
from potatoq.brokers.history_rollup import rollups_of, sample_of_row
from potatoq.brokers.history_sql import COLUMNS
from potatoq.brokers.records import Complete, Delivery, ResultRecord, WorkerRef, decode_delivery
from potatoq.brokers.sqlite.setup import SQL, migrate
from potatoq.message import Message, new_id

Row = tuple[Any, ...]

BATCHED_SCHEMA = """
CREATE TABLE history_batches (seq INTEGER PRIMARY KEY, first_at REAL NOT NULL,
                              last_at REAL NOT NULL, records TEXT NOT NULL);
CREATE INDEX history_batches_last ON history_batches (last_at);
CREATE TABLE history_keys (kind TEXT NOT NULL, value TEXT NOT NULL, batch INTEGER NOT NULL,
                           PRIMARY KEY (kind, value, batch)) WITHOUT ROWID;
CREATE TABLE history_tasks (task_id TEXT NOT NULL, batch INTEGER NOT NULL,
                            PRIMARY KEY (task_id, batch)) WITHOUT ROWID;
"""

#: The columns the keys table holds a batch's distinct values of (by COLUMNS position).
KEYED = {kind: COLUMNS.index(kind) for kind in ("name", "state", "queue", "group_id")}
TASK, FINISHED = COLUMNS.index("task_id"), COLUMNS.index("finished_at")


def settles(n: int) -> list[tuple[Delivery, Complete]]:
    """``n`` settles as a benchmark worker's: decoded deliveries (UUID7 ids, three task
    names, one queue, sent as groups of 100) completed with a stored result of ``None``."""
    worker = WorkerRef("potatoq@bench", 4242)
    out = []
    group = new_id()
    for i in range(n):
        if i % 100 == 0:
            group = new_id()
        headers = {"sent_at": time.time() - 2.0, "group_id": group, "root_id": None}
        message = Message(id=new_id(), task=f"bench.task{i % 3}", queue="celery", args=(i,), headers=headers)
        delivery = decode_delivery(
            id=message.id, queue="celery", raw=message.encode(), token="1", deliveries=1, worker=worker
        )
        out.append((delivery, Complete(ResultRecord(message.id, states.SUCCESS, None))))
    return out


def record_of(delivery: Delivery, outcome: Complete, settings: HistorySettings) -> HistoryRow:
    row = row_for_settle(delivery, outcome, time.time(), settings)
    assert row is not None
    return row


def records(n: int) -> list[Row]:
    """The rows of ``n`` settles, in ``COLUMNS`` order, as the SQLite broker inserts them."""
    settings = HistorySettings()
    return [record_of(d, o, settings) for d, o in settles(n)]


def built(n: int, size: int) -> float:
    """CPU µs per record to build ``n`` records, their rows and rollups (batches of ``size``)."""
    settings = HistorySettings()
    made = settles(n)
    start = time.process_time()
    held: list[HistoryRow] = []
    for delivery, outcome in made:
        held.append(record_of(delivery, outcome, settings))
        if len(held) == size:
            _ = rollups_of(map(sample_of_row, held))
            held = []
    return (time.process_time() - start) / n * 1e6


def connect(path: Path, layout: str) -> sqlite3.Connection:
    """A new file with the broker's schema (``rows``, ``table only``: its history indexes
    dropped) or the batched prototype's."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    if layout == "batched":
        conn.executescript(BATCHED_SCHEMA)
        return conn
    migrate(conn, time.time())
    if layout == "table only":
        for (index,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'potatoq_history'"
        ).fetchall():
            conn.execute(f'DROP INDEX "{index}"')
    return conn


def write_rows(conn: sqlite3.Connection, batch: Sequence[Row]) -> None:
    conn.executemany(SQL["history_insert"], batch)


def write_batched(conn: sqlite3.Connection, batch: Sequence[Row]) -> None:
    seq = conn.execute(
        "INSERT INTO history_batches (first_at, last_at, records) VALUES (?, ?, ?)",
        (min(r[FINISHED] for r in batch), max(r[FINISHED] for r in batch), json.dumps(batch)),
    ).lastrowid
    keys = {(kind, r[at]) for kind, at in KEYED.items() for r in batch if r[at] is not None}
    conn.executemany(
        "INSERT OR IGNORE INTO history_keys (kind, value, batch) VALUES (?, ?, ?)",
        [(kind, value, seq) for kind, value in keys],
    )
    conn.executemany(
        "INSERT OR IGNORE INTO history_tasks (task_id, batch) VALUES (?, ?)",
        [(r[TASK], seq) for r in batch],
    )


def timed(conn: sqlite3.Connection, rows: Sequence[Row], size: int, write: Callable[..., None]) -> float:
    """CPU µs per record to write ``rows`` in transactions of ``size``."""
    start = time.process_time()
    for i in range(0, len(rows), size):
        conn.execute("BEGIN IMMEDIATE")
        write(conn, rows[i : i + size])
        conn.execute("COMMIT")
    return (time.process_time() - start) / len(rows) * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    layouts: dict[str, Callable[..., None]] = {
        "rows": write_rows,
        "batched": write_batched,
        "table only": write_rows,
    }
    found: dict[str, list[float]] = {name: [] for name in (*layouts, "build")}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            rows = records(args.records)
            for name, write in layouts.items():
                path = Path(tmp) / f"{name.replace(' ', '_')}-{run}.sqlite3"
                conn = connect(path, name)
                found[name].append(timed(conn, rows, args.batch, write))
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                conn.close()
                sizes[name] = path.stat().st_size
                path.unlink()
            found["build"].append(built(min(args.records, 20_000), args.batch))
            print(json.dumps({"run": run + 1, **{k: round(v[-1], 2) for k, v in found.items()}}), flush=True)
    print(f"{args.records} records in transactions of {args.batch}, {args.runs} runs")
    for name, values in found.items():
        file = f" (file {sizes[name] / 1e6:.1f} MB)" if name in sizes else ""
        print(f"{name:>10}: {statistics.median(values):6.2f} µs per record{file}")


if __name__ == "__main__":
    main()
