"""``make bench-scale``: does the cost per task stay flat behind a large backlog?

Broker-level (one process, the broker API a worker uses; no worker processes), for SQLite,
PostgreSQL, Redis (``scale_redis``) and RabbitMQ 4 (``scale_rabbitmq``). In one run, per
broker:

1. on an empty broker: enqueue/s, processed/s (claim + settle with a stored result) and
   the idle-to-start latency (a thread blocked in ``wait()`` until a task is enqueued);
2. fill a backlog (``--ready`` ready tasks, ``--delayed`` far-future delayed ones and
   ``--results`` stored results: bulk SQL, or the broker's own enqueue in big batches)
   in the steps of ``--at``, and after each step measure the same three figures again,
   on other queues of the same broker;
3. the backlog queue's own processed/s, the time ``queue_stats()`` takes (inspection),
   and the bytes per waiting task and per stored result (disk for SQLite and PostgreSQL,
   server memory for Redis, queue memory and disk for RabbitMQ);
4. drain the ready backlog (for at most ``--drain-seconds``) and report its rate;
5. PostgreSQL: how fast one housekeeping call deletes ``--expire`` expired results;
   SQLite: make every delayed task due and every stored result expired at once (a mass ETA
   after downtime), then promote them (by claims) and expire them (by ``recover()``) while
   another connection takes the write lock in a loop: the longest it waited is the longest
   write transaction (plus scheduling delay on a busy machine).

Defaults are the issue's sizes (1,000,000 ready + 1,000,000 delayed + 10,000,000 results);
pass smaller ones on a shared machine. Prints one markdown table per broker; ``--json``
appends the figures for ``benchmarks.scale_plot``. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
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

from benchmarks.scale_target import WORKER, Target
from benchmarks.scale_target import message as _message
from potatoq.brokers import create_broker
from potatoq.brokers.base import Broker, BrokerConfig, Complete, ResultRecord


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


def fill_sqlite(broker: Broker, path: Path, ready: int, delayed: int, results: int) -> tuple[int, int]:
    import sqlite3

    broker.migrate()
    payload = _message("backlog").encode()
    now = time.time()
    tag = uuid.uuid4().hex[:6]  # a backlog is filled in steps: ids unique across them
    conn = sqlite3.connect(path)
    size_before = _sqlite_bytes(conn)
    with conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :k - 1)"
            " INSERT INTO potatoq_jobs (id, queue, state, run_at, payload)"
            " SELECT :tag || '-' || i, 'backlog', CASE WHEN i < :ready THEN 1 ELSE 0 END,"
            " CASE WHEN i < :ready THEN :now ELSE :now + 3e7 END, :payload FROM n",
            {"k": ready + delayed, "ready": ready, "now": now, "payload": payload, "tag": "b" + tag},
        )
    size_jobs = _sqlite_bytes(conn)
    with conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :k - 1)"
            " INSERT INTO potatoq_results (task_id, state, payload, expires_at)"
            " SELECT :tag || '-' || i, 'SUCCESS', :payload, :now + 86400 FROM n",
            {"k": results, "now": now, "payload": payload, "tag": "r" + tag},
        )
    conn.execute("ANALYZE")
    size_results = _sqlite_bytes(conn)
    checkpoint_wal(conn)
    conn.close()
    return size_jobs - size_before, size_results - size_jobs


def checkpoint_wal(conn: Any) -> None:
    """Write the bulk fill's WAL into the database and truncate it, as it would have been
    bit by bit had the backlog come from enqueues: else the first writes measured behind it
    run that checkpoint (gigabytes) inside their COMMIT, and every read searches a WAL index
    of millions of frames. Its time is printed, not counted in any figure."""
    database = conn.execute("PRAGMA database_list").fetchone()[2]
    wal = Path(database + "-wal")
    size = wal.stat().st_size if wal.exists() else 0
    start = time.perf_counter()
    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    print(
        f"(SQLite: checkpointed the fill's WAL, {size / 1e6:,.0f} MB, in {time.perf_counter() - start:.1f} s"
        f"{'; busy: not all of it' if busy else ''})",
        flush=True,
    )


def _pg_sizes(conn: Any, schema: str) -> tuple[int, int]:
    row = conn.execute(
        "SELECT pg_total_relation_size(%s::regclass), pg_total_relation_size(%s::regclass)",
        (f'"{schema}".potatoq_jobs', f'"{schema}".potatoq_results'),
    ).fetchone()
    return int(row[0]), int(row[1])


def fill_postgres(broker: Broker, ready: int, delayed: int, results: int) -> tuple[int, int]:
    import psycopg
    from psycopg import sql

    broker.migrate()
    name = getattr(broker, "schema")  # noqa: B009
    schema = sql.Identifier(name)
    payload = _message("backlog").encode()
    tag = uuid.uuid4().hex[:6]  # a backlog is filled in steps: ids unique across them
    with psycopg.connect(broker.config.url, autocommit=True) as conn:
        jobs_before, results_before = _pg_sizes(conn, name)
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.potatoq_jobs (id, queue, state, run_at, payload)"
                " SELECT %(tag)s || i, 'backlog', CASE WHEN i < %(ready)s THEN 1 ELSE 0 END,"
                " CASE WHEN i < %(ready)s THEN now() ELSE now() + interval '1 year' END, %(payload)s"
                " FROM generate_series(0, %(k)s - 1) AS i"
            ).format(schema),
            {"k": ready + delayed, "ready": ready, "payload": payload, "tag": f"b{tag}-"},
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.potatoq_results (task_id, state, record, expires_at)"
                " SELECT %(tag)s || i, 'SUCCESS', %(payload)s, now() + interval '1 day'"
                " FROM generate_series(0, %(k)s - 1) AS i"
            ).format(schema),
            {"k": results, "payload": payload, "tag": f"r{tag}-"},
        )
        for table in ("potatoq_jobs", "potatoq_results"):
            conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(schema, sql.Identifier(table)))
        jobs_after, results_after = _pg_sizes(conn, name)
    return jobs_after - jobs_before, results_after - results_before


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


def sqlite_lock_wait(
    broker: Broker, path: Path, delayed: int
) -> tuple[float, float, float, int, int, float, float, float]:
    """(longest wait for the write lock in ms with no other writer for 2 s (the machine's
    noise), while one recover() call deletes expired results, and while due tasks are
    promoted; tasks promoted, results deleted by that call, seconds; then the longest write
    transaction the broker itself timed in ms (its ``write_holds``) while expiring and while
    promoting: the wait can be longer, a waiter losing the race to a run of short ones)."""
    import sqlite3

    from potatoq.brokers.sqlite import SQLiteBroker
    from potatoq.brokers.sqlite.holds import WriteHolds

    assert isinstance(broker, SQLiteBroker)

    now = time.time()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE potatoq_jobs SET run_at = ? WHERE state = 0 AND queue = 'backlog'", (now - 1,))
        expired = conn.execute("UPDATE potatoq_results SET expires_at = ?", (now - 60,)).rowcount
    with sqlite3.connect(path) as conn:
        checkpoint_wal(conn)  # those UPDATEs' WAL: the broker's first commit would checkpoint it
    conn.close()
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
    quiet = 10**9  # no log lines: the benchmark reads the figure
    broker.write_holds = WriteHolds(quiet)
    try:
        broker.recover(3600.0, 5)  # result expiry (and dead-letter trimming) in batches
        expiring, longest[0] = longest[0], 0.0
        held_expiring = broker.write_holds.longest.seconds
        broker.write_holds = WriteHolds(quiet)
        with sqlite3.connect(path) as conn:
            expired -= int(conn.execute("SELECT count(*) FROM potatoq_results").fetchone()[0])
        conn.close()
        promoted, claims = 0, 0
        while promoted < delayed:  # each claim promotes a batch of due tasks, then claims one
            delivery = broker.claim(["backlog"], WORKER)
            if delivery is None:
                break
            broker.settle(delivery, Complete())
            claims += 1
            # Counting the scheduled tasks reads the index: at 1,000,000 delayed tasks,
            # counting after every claim took longer than the claims.
            if claims % 100 == 0 or promoted >= delayed - 20_000:
                promoted = delayed - _scheduled(path)
    finally:
        seconds = time.perf_counter() - start
        stop.set()
        thread.join()
    held_promoting = broker.write_holds.longest.seconds
    return (
        alone * 1000,
        expiring * 1000,
        longest[0] * 1000,
        promoted,
        expired,
        seconds,
        held_expiring * 1000,
        held_promoting * 1000,
    )


def _scheduled(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM potatoq_jobs WHERE state = 0").fetchone()[0])


@contextmanager
def sqlite_broker(args: argparse.Namespace) -> Iterator[Target]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scale.sqlite3"
        broker = create_broker(BrokerConfig(url=f"sqlite:///{path}"))
        try:
            yield Target(
                broker,
                lambda r, d, s: fill_sqlite(broker, path, r, d, s),
                "bytes on disk (table + indexes)",
                extra=lambda: _sqlite_rows(broker, path, args.delayed),
            )
        finally:
            broker.close()


def _sqlite_rows(broker: Broker, path: Path, delayed: int) -> list[tuple[str, str]]:
    alone, expiring, promoting, promoted, expired, seconds, held_exp, held_prom = sqlite_lock_wait(
        broker, path, delayed
    )
    return [
        ("longest wait for the write lock, no other writer (2 s)", f"{alone:,.1f} ms"),
        (f"... while one `recover()` call deleted {expired:,} expired results", f"{expiring:,.1f} ms"),
        (f"... while {promoted:,} due tasks were promoted (both in {seconds:.1f} s)", f"{promoting:,.1f} ms"),
        ("longest write transaction of the broker (its own timing), expiring", f"{held_exp:,.1f} ms"),
        ("... promoting", f"{held_prom:,.1f} ms"),
    ]


@contextmanager
def postgres_broker(args: argparse.Namespace) -> Iterator[Target]:
    import psycopg
    from psycopg import sql

    url = args.postgres_url
    schema = f"pq_scale_{uuid.uuid4().hex[:8]}"
    broker = create_broker(BrokerConfig(url=url, transport_options={"schema": schema}))
    try:
        yield Target(
            broker,
            lambda r, d, s: fill_postgres(broker, r, d, s),
            "bytes on disk (table + indexes)",
            extra=lambda: [
                (
                    f"expired results deleted/s (one sweep of {args.expire:,})",
                    f"{pg_expiry_rate(broker, args.expire):,.0f}",
                )
            ],
        )
    finally:
        broker.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _proportion(args: argparse.Namespace, ready: int) -> tuple[int, int, int]:
    """The backlog at a step of ``ready`` ready tasks: delayed tasks and results in the
    proportions of the full sizes."""
    scale = ready / args.ready
    return ready, round(args.delayed * scale), round(args.results * scale)


def run(name: str, made: Callable[[argparse.Namespace], Any], args: argparse.Namespace) -> dict[str, Any]:
    """Measure one broker empty and behind each step of the backlog; print and return the figures."""
    load_before = os.getloadavg()
    with made(args) as target:
        broker = target.broker
        points = [{"backlog": 0, **figures(broker, "empty", args.samples, args.tasks)}]
        filled, bytes_jobs, bytes_results, fill_s = (0, 0, 0), 0, 0, 0.0
        for ready in args.at:
            want = _proportion(args, ready)
            start = time.perf_counter()
            added = target.fill(*(w - f for w, f in zip(want, filled, strict=True)))
            fill_s += time.perf_counter() - start
            bytes_jobs, bytes_results, filled = bytes_jobs + added[0], bytes_results + added[1], want
            behind = figures(broker, "behind", args.samples, args.tasks)
            points.append({"backlog": 0, "ready": want[0], "delayed": want[1], "results": want[2], **behind})
        paired = paired_rounds(name, made, args, broker) if args.paired else []
        done, seconds = process(broker, "backlog", args.tasks)
        own = done / seconds
        inspect = inspection_ms(broker)
        deadline = time.monotonic() + args.drain_seconds
        drained, drain_s = process(broker, "backlog", args.ready, deadline)
        extra = target.extra() if target.extra is not None else []
    ready, delayed, results = filled
    delayed *= target.keeps_delayed
    results *= target.keeps_results
    for point in points[1:]:
        point["backlog"] = point["ready"] + point["delayed"] * target.keeps_delayed
    out = {
        "broker": name,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": [load_before, os.getloadavg()],
        "sizes": {"ready": ready, "delayed": delayed, "results": results},
        "points": points,
        "memory": target.memory,
        "bytes per waiting task": bytes_jobs / max(1, ready + delayed),
        "bytes per result": bytes_results / results if results else None,
        "also": target.also,
        "paired": paired,
    }
    _print(out, fill_s, own, inspect, (drained, drain_s), extra)
    return out


def _twin_args(name: str, args: argparse.Namespace) -> argparse.Namespace | None:
    """The arguments that make an empty twin of the broker ``made`` builds, or None where
    there is none: SQLite and PostgreSQL make a new file or schema anyway; Redis takes the
    next database of the same server (a prefix alone would share the full keyspace);
    RabbitMQ's backlog is a queue of the node every queue shares, so no empty twin."""
    twin = argparse.Namespace(**vars(args))
    if name == "Redis":
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(args.redis_url)
        db = int(parts.path.strip("/") or 0)
        twin.redis_url = urlunsplit(parts._replace(path=f"/{(db + 1) % 16}"))
    elif name == "RabbitMQ":
        return None
    return twin


def paired_rounds(
    name: str, made: Callable[[argparse.Namespace], Any], args: argparse.Namespace, full: Broker
) -> list[dict[str, dict[str, float]]]:
    """``--paired N``: N rounds, each measuring an empty twin of the broker and the full one
    one right after the other (which goes first alternates), so that a ratio compares two
    figures taken within seconds of each other, not minutes apart as empty-then-behind
    does: on a shared machine the drift between those is often larger than the effect."""
    twin_args = _twin_args(name, args)
    if twin_args is None:
        print(f"({name}: no empty twin to pair with; --paired skipped)", flush=True)
        return []
    rounds: list[dict[str, dict[str, float]]] = []
    with made(twin_args) as twin:
        for i in range(args.paired):
            pair: dict[str, dict[str, float]] = {}
            for which in ("empty", "full") if i % 2 == 0 else ("full", "empty"):
                broker = twin.broker if which == "empty" else full
                pair[which] = figures(broker, f"pair-{which}", args.samples, args.tasks)
            rounds.append(pair)
    return rounds


def _print(
    out: dict[str, Any],
    fill_s: float,
    own: float,
    inspect: float,
    drain: tuple[int, float],
    extra: list[tuple[str, str]],
) -> None:
    sizes, points = out["sizes"], out["points"]
    before, after = (" ".join(f"{x:.2f}" for x in load) for load in out["load"])
    print(
        f"\n### {out['broker']}: {sizes['ready']:,} ready + {sizes['delayed']:,} delayed"
        f" + {sizes['results']:,} results"
    )
    print(f"({out['date']}; filled in {fill_s:.1f} s; load average {before} before, {after} after)\n")
    heads = ["empty"] + [f"behind {p['backlog']:,}" for p in points[1:]]
    print("| figure | " + " | ".join(heads) + " | ratio last/empty |")
    print("|---|" + "---:|" * (len(heads) + 1))
    for key in ("enqueue/s", "processed/s", "idle-to-start p50 ms", "idle-to-start p99 ms"):
        values = [p[key] for p in points]
        ratio = values[-1] / values[0] if values[0] else float("nan")
        print(f"| {key} | " + " | ".join(f"{v:,.1f}" for v in values) + f" | {ratio:.2f} |")
    gap = " |" * len(heads)
    print(f"| processed/s from the backlog queue itself |{gap[:-2]} {own:,.1f} | |")
    print(f"| `queue_stats()` (median of 5) |{gap[:-2]} {inspect:,.1f} ms | |")
    drained, seconds = drain
    print(f"| drain: {drained:,} tasks in {seconds:.1f} s |{gap[:-2]} {drained / seconds:,.1f}/s | |")
    print(f"| {out['memory']} per waiting task |{gap[:-2]} {out['bytes per waiting task']:,.0f} | |")
    if out["bytes per result"] is not None:
        print(f"| {out['memory']} per stored result |{gap[:-2]} {out['bytes per result']:,.0f} | |")
    for what, value in out["also"]:
        print(f"| {what} per waiting task |{gap[:-2]} {value:,.0f} | |")
    for what, value in extra:
        print(f"| {what} |{gap[:-2]} {value} | |")
    if out["paired"]:
        _print_paired(out["paired"])


def _print_paired(rounds: list[dict[str, dict[str, float]]]) -> None:
    print(f"\nPaired: {len(rounds)} rounds, an empty twin and the full broker one right after the other\n")
    print("| figure | empty (median) | full (median) | full / empty, median of rounds | rounds |")
    print("|---|---:|---:|---:|---|")
    for key in ("enqueue/s", "processed/s", "idle-to-start p50 ms", "idle-to-start p99 ms"):
        empty = [r["empty"][key] for r in rounds]
        full = [r["full"][key] for r in rounds]
        ratios = [f / e if e else float("nan") for e, f in zip(empty, full, strict=True)]
        print(
            f"| {key} | {statistics.median(empty):,.1f} | {statistics.median(full):,.1f} |"
            f" {statistics.median(ratios):.2f} | {' · '.join(f'{r:.2f}' for r in ratios)} |"
        )


BROKERS = ("sqlite", "postgres", "redis", "rabbitmq")


def main() -> None:
    from benchmarks import scale_rabbitmq, scale_redis

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--ready", type=int, default=1_000_000)
    parser.add_argument("--delayed", type=int, default=1_000_000)
    parser.add_argument("--results", type=int, default=10_000_000)
    parser.add_argument(
        "--at",
        default="",
        help="ready-task counts to measure at, comma-separated, ascending, the last = --ready"
        " (delayed tasks and results in proportion); default: --ready only",
    )
    parser.add_argument("--tasks", type=int, default=2000, help="tasks per rate measurement")
    parser.add_argument("--samples", type=int, default=50, help="idle-to-start samples")
    parser.add_argument("--drain-seconds", type=float, default=float("inf"))
    parser.add_argument(
        "--paired",
        type=int,
        default=0,
        help="after the fill, N rounds of an empty twin broker and the full one measured back to back"
        " (not RabbitMQ); the ratios that matter on a shared machine",
    )
    parser.add_argument("--expire", type=int, default=200_000, help="PostgreSQL: expired results to sweep")
    parser.add_argument("--brokers", default="sqlite,postgres,redis,rabbitmq")
    parser.add_argument("--postgres-url", default="postgresql://127.0.0.1:5432/test")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("POTATOQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"),
        help="Redis: a server of its own gives a clean memory figure; also RabbitMQ's result backend",
    )
    parser.add_argument(
        "--rabbitmq-url",
        default=os.environ.get("POTATOQ_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5673/"),
        help="RabbitMQ 4 (a node of its own: the delayed backlog fills the shared delay cascade)",
    )
    scale_rabbitmq.add_arguments(parser)
    parser.add_argument("--json", type=Path, help="also append each broker's figures to this JSON-lines file")
    args = parser.parse_args()
    for key in ("ready", "delayed", "results", "tasks", "samples", "expire"):
        if getattr(args, key) < 0 or (key in ("ready", "tasks", "samples") and getattr(args, key) < 1):
            parser.error(f"--{key} is too small: {getattr(args, key)}")
    args.at = [int(x) for x in args.at.split(",") if x] or [args.ready]
    if args.at != sorted(args.at) or args.at[-1] != args.ready or args.at[0] < 1:
        parser.error("--at: ascending counts, each at least 1, the last equal to --ready")
    chosen = args.brokers.split(",")
    unknown = set(chosen) - set(BROKERS)
    if unknown:
        parser.error(f"--brokers: unknown {sorted(unknown)} (choose from {', '.join(BROKERS)})")
    print(f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; cpus {os.cpu_count()}")
    made = {
        "sqlite": ("SQLite", sqlite_broker),
        "postgres": ("PostgreSQL", postgres_broker),
        "redis": ("Redis", scale_redis.redis_target),
        "rabbitmq": ("RabbitMQ", scale_rabbitmq.rabbitmq_target),
    }
    for key in BROKERS:
        if key in chosen:
            out = run(*made[key], args)
            if args.json is not None:
                with args.json.open("a") as f:
                    f.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
