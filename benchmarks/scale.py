"""``make bench-scale``: does the cost per task stay flat behind a large backlog?

Broker-level (one process, the broker API a worker uses; no worker processes), for SQLite
and PostgreSQL. In one run, per broker:

1. on an empty database: enqueue/s, processed/s (claim + settle with a stored result) and
   the idle-to-start latency (a thread blocked in ``wait()`` until a task is enqueued);
2. fill a backlog (``--ready`` ready tasks, ``--delayed`` far-future delayed ones and
   ``--results`` stored results, by bulk SQL) and measure the bytes per waiting task;
3. the same three figures again, on other queues of the same database, plus the
   backlog queue's own processed/s and the time ``queue_stats()`` takes (inspection);
4. drain the ready backlog (for at most ``--drain-seconds``) and report its rate;
5. SQLite: make every delayed task due and every stored result expired at once (a mass ETA
   after downtime), then promote them (by claims) and expire them (by ``recover()``) while
   another connection takes the write lock in a loop: the longest it waited is the longest
   write transaction (plus scheduling delay on a busy machine).

Defaults are the issue's sizes (1,000,000 ready + 1,000,000 delayed); pass smaller ones on a
shared machine. Prints one markdown table per broker. Not part of CI.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from potatoq.brokers import create_broker
from potatoq.brokers.base import Broker, BrokerConfig, Complete, ResultRecord, WorkerRef
from potatoq.message import Message, new_id

WORKER = WorkerRef("bench-scale", os.getpid())
BATCH = 500  # messages per enqueue call


def _message(queue: str, eta: float | None = None) -> Message:
    return Message(id=new_id(), task="bench.noop", queue=queue, eta=eta)


def enqueue_rate(broker: Broker, queue: str, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        broker.enqueue([_message(queue)])
    return n / (time.perf_counter() - start)


def process(broker: Broker, queue: str, n: int, deadline: float | None = None) -> tuple[int, float]:
    """Claim and settle (storing a result) up to n tasks; (done, seconds)."""
    done = 0
    start = time.perf_counter()
    while done < n and (deadline is None or time.monotonic() < deadline):
        delivery = broker.claim([queue], WORKER)
        if delivery is None:
            break
        record = ResultRecord(task_id=delivery.id, state="SUCCESS", result=None, date_done=time.time())
        broker.settle(delivery, Complete(result=record))
        done += 1
    return done, time.perf_counter() - start


def _claim_one(broker: Broker, queue: str, sent: list[float], latencies: list[float]) -> None:
    """Wait idle for one task of ``queue``; record how long after ``sent[0]`` it was claimed."""
    while True:
        delivery = broker.claim([queue], WORKER)
        if delivery is not None:
            latencies.append(time.perf_counter() - sent[0])
            broker.settle(delivery, Complete())
            return
        broker.wait([queue], 5.0)


def idle_to_start(broker: Broker, queue: str, samples: int) -> list[float]:
    """Seconds from enqueue to a waiting thread's claim returning it."""
    latencies: list[float] = []
    for _ in range(samples):
        sent: list[float] = []
        thread = threading.Thread(target=_claim_one, args=(broker, queue, sent, latencies))
        thread.start()
        time.sleep(0.05)  # let it block in wait(): the latency measured is the idle one
        sent.append(time.perf_counter())
        broker.enqueue([_message(queue)])
        thread.join(30)
    return latencies


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(broker: Broker, tag: str, samples: int, n: int) -> dict[str, float]:
    queue = f"{tag}-{uuid.uuid4().hex[:6]}"
    out = {"enqueue/s": enqueue_rate(broker, queue, n)}
    done, seconds = process(broker, queue, n)
    out["processed/s"] = done / seconds
    lat = idle_to_start(broker, f"{queue}-idle", samples)
    out["idle-to-start p50 ms"] = statistics.median(lat) * 1000
    out["idle-to-start p99 ms"] = p(lat, 0.99) * 1000
    return out


def inspection_ms(broker: Broker) -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        broker.queue_stats()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


# -- bulk fill, per broker ---------------------------------------------------------------------


def _sqlite_bytes(conn: Any) -> int:
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    return int(pages) * int(conn.execute("PRAGMA page_size").fetchone()[0])


def fill_sqlite(broker: Broker, path: Path, ready: int, delayed: int, results: int) -> float:
    import sqlite3

    broker.migrate()
    payload = _message("backlog").encode()
    now = time.time()
    conn = sqlite3.connect(path)
    size_before = _sqlite_bytes(conn)
    with conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :k - 1)"
            " INSERT INTO potatoq_jobs (id, queue, state, run_at, payload)"
            " SELECT 'b-' || i, 'backlog', CASE WHEN i < :ready THEN 1 ELSE 0 END,"
            " CASE WHEN i < :ready THEN :now ELSE :now + 3e7 END, :payload FROM n",
            {"k": ready + delayed, "ready": ready, "now": now, "payload": payload},
        )
    size_jobs = _sqlite_bytes(conn)
    with conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :k - 1)"
            " INSERT INTO potatoq_results (task_id, state, payload, expires_at)"
            " SELECT 'r-' || i, 'SUCCESS', :payload, :now + 86400 FROM n",
            {"k": results, "now": now, "payload": payload},
        )
    conn.execute("ANALYZE")
    conn.close()
    return (size_jobs - size_before) / max(1, ready + delayed)


def fill_postgres(broker: Broker, ready: int, delayed: int, results: int) -> float:
    import psycopg
    from psycopg import sql

    broker.migrate()
    schema = sql.Identifier(getattr(broker, "schema"))  # noqa: B009
    payload = _message("backlog").encode()
    with psycopg.connect(broker.config.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.potatoq_jobs (id, queue, state, run_at, payload)"
                " SELECT 'b-' || i, 'backlog', CASE WHEN i < %(ready)s THEN 1 ELSE 0 END,"
                " CASE WHEN i < %(ready)s THEN now() ELSE now() + interval '1 year' END, %(payload)s"
                " FROM generate_series(0, %(k)s - 1) AS i"
            ).format(schema),
            {"k": ready + delayed, "ready": ready, "payload": payload},
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.potatoq_results (task_id, state, record, expires_at)"
                " SELECT 'r-' || i, 'SUCCESS', %(payload)s, now() + interval '1 day'"
                " FROM generate_series(0, %(k)s - 1) AS i"
            ).format(schema),
            {"k": results, "payload": payload},
        )
        for table in ("potatoq_jobs", "potatoq_results"):
            conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(schema, sql.Identifier(table)))
        row = conn.execute(
            "SELECT pg_total_relation_size(%s::regclass)",
            (f'"{getattr(broker, "schema")}".potatoq_jobs',),  # noqa: B009
        ).fetchone()
    assert row is not None
    return float(row[0]) / max(1, ready + delayed)


def pg_expiry_rate(broker: Broker, n: int) -> float:
    """Expired results deleted per second by one housekeeping call (batched sweep)."""
    import psycopg
    from psycopg import sql

    schema = sql.Identifier(getattr(broker, "schema"))  # noqa: B009
    with psycopg.connect(broker.config.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.potatoq_results (task_id, state, record, expires_at)"
                " SELECT 'x-' || i, 'SUCCESS', '\\x00'::bytea, now() - interval '1 minute'"
                " FROM generate_series(0, %s - 1) AS i"
            ).format(schema),
            (n,),
        )
    start = time.perf_counter()
    getattr(broker, "_housekeeping")()  # noqa: B009
    return n / (time.perf_counter() - start)


def sqlite_lock_wait(broker: Broker, path: Path, delayed: int) -> tuple[float, float, float, int, int, float]:
    """(longest wait for the write lock in ms with no other writer for 2 s (the machine's
    noise), while one recover() call deletes expired results, and while due tasks are
    promoted; tasks promoted, results deleted by that call, seconds)."""
    import sqlite3

    now = time.time()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE potatoq_jobs SET run_at = ? WHERE state = 0 AND queue = 'backlog'", (now - 1,))
        expired = conn.execute("UPDATE potatoq_results SET expires_at = ?", (now - 60,)).rowcount
    stop = threading.Event()
    longest = [0.0]

    def probe() -> None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=60)
        while not stop.is_set():
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("COMMIT")
            longest[0] = max(longest[0], time.perf_counter() - start)
            stop.wait(0.0005)
        conn.close()

    thread = threading.Thread(target=probe)
    thread.start()
    time.sleep(2.0)  # the probe alone: what scheduling on this machine adds to any wait
    alone, longest[0] = longest[0], 0.0
    start = time.perf_counter()
    try:
        broker.recover(3600.0, 5)  # result expiry (and dead-letter trimming) in batches
        expiring, longest[0] = longest[0], 0.0
        with sqlite3.connect(path) as conn:
            expired -= int(conn.execute("SELECT count(*) FROM potatoq_results").fetchone()[0])
        conn.close()
        promoted = 0
        while promoted < delayed:  # each claim promotes a batch of due tasks, then claims one
            delivery = broker.claim(["backlog"], WORKER)
            if delivery is None:
                break
            broker.settle(delivery, Complete())
            promoted = delayed - _scheduled(path)
    finally:
        seconds = time.perf_counter() - start
        stop.set()
        thread.join()
    return alone * 1000, expiring * 1000, longest[0] * 1000, promoted, expired, seconds


def _scheduled(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM potatoq_jobs WHERE state = 0").fetchone()[0])


@contextmanager
def sqlite_broker() -> Iterator[tuple[Broker, Callable[[int, int, int], float], Path]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scale.sqlite3"
        broker = create_broker(BrokerConfig(url=f"sqlite:///{path}"))
        try:
            yield broker, lambda r, d, s: fill_sqlite(broker, path, r, d, s), path
        finally:
            broker.close()


@contextmanager
def postgres_broker(url: str) -> Iterator[tuple[Broker, Callable[[int, int, int], float], None]]:
    import psycopg
    from psycopg import sql

    schema = f"pq_scale_{uuid.uuid4().hex[:8]}"
    broker = create_broker(BrokerConfig(url=url, transport_options={"schema": schema}))
    try:
        yield broker, lambda r, d, s: fill_postgres(broker, r, d, s), None
    finally:
        broker.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def run(name: str, made: Callable[[], object], args: argparse.Namespace) -> None:
    with made() as (broker, fill, path):  # type: ignore[attr-defined]
        empty = figures(broker, "empty", args.samples, args.tasks)
        start = time.perf_counter()
        per_task = fill(args.ready, args.delayed, args.results)
        fill_s = time.perf_counter() - start
        behind = figures(broker, "behind", args.samples, args.tasks)
        done, seconds = process(broker, "backlog", args.tasks)
        behind["backlog processed/s"] = done / seconds
        inspect = inspection_ms(broker)
        deadline = time.monotonic() + args.drain_seconds
        drained, drain_s = process(broker, "backlog", args.ready, deadline)
        expiry = pg_expiry_rate(broker, args.expire) if name == "PostgreSQL" else None
        lock = sqlite_lock_wait(broker, path, args.delayed) if path is not None else None
    print(f"\n### {name}: {args.ready:,} ready + {args.delayed:,} delayed + {args.results:,} results")
    print(f"(filled in {fill_s:.1f} s; load average {os.getloadavg()[0]:.2f})\n")
    print("| figure | empty queue | behind the backlog | ratio |\n|---|---:|---:|---:|")
    for key, value in empty.items():
        ratio = behind[key] / value if value else float("nan")
        print(f"| {key} | {value:,.1f} | {behind[key]:,.1f} | {ratio:.2f} |")
    print(f"| processed/s from the backlog queue itself | | {behind['backlog processed/s']:,.1f} | |")
    print(f"| `queue_stats()` (median of 5) | | {inspect:,.1f} ms | |")
    print(f"| drain: {drained:,} tasks in {drain_s:.1f} s | | {drained / drain_s:,.1f}/s | |")
    print(f"| bytes on disk per waiting task (table + indexes) | | {per_task:,.0f} | |")
    if expiry is not None:
        print(f"| expired results deleted/s (one sweep of {args.expire:,}) | | {expiry:,.0f} | |")
    if lock is not None:
        alone, expiring, promoting, promoted, expired, seconds = lock
        print(f"| longest wait for the write lock, no other writer (2 s) | | {alone:,.1f} ms | |")
        print(
            f"| ... while one `recover()` call deleted {expired:,} expired results | | {expiring:,.1f} ms | |"
        )
        print(
            f"| ... while {promoted:,} due tasks were promoted (both in {seconds:.1f} s) "
            f"| | {promoting:,.1f} ms | |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--ready", type=int, default=1_000_000)
    parser.add_argument("--delayed", type=int, default=1_000_000)
    parser.add_argument("--results", type=int, default=10_000_000)
    parser.add_argument("--tasks", type=int, default=2000, help="tasks per rate measurement")
    parser.add_argument("--samples", type=int, default=50, help="idle-to-start samples")
    parser.add_argument("--drain-seconds", type=float, default=float("inf"))
    parser.add_argument("--expire", type=int, default=200_000, help="PostgreSQL: expired results to sweep")
    parser.add_argument("--brokers", default="sqlite,postgres")
    parser.add_argument("--postgres-url", default="postgresql://127.0.0.1:5432/test")
    args = parser.parse_args()
    for key in ("ready", "delayed", "results", "tasks", "samples", "expire"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be at least 1, got {getattr(args, key)}")
    print(f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; cpus {os.cpu_count()}")
    chosen = args.brokers.split(",")
    unknown = set(chosen) - {"sqlite", "postgres"}
    if unknown:
        parser.error(f"--brokers: unknown {sorted(unknown)} (choose from sqlite, postgres)")
    if "sqlite" in chosen:
        run("SQLite", sqlite_broker, args)
    if "postgres" in chosen:
        run("PostgreSQL", lambda: postgres_broker(args.postgres_url), args)


if __name__ == "__main__":
    main()
