"""``make bench-history-scale``: do history pages stay fast at 10 million records?

Fills task history by bulk SQL (SQLite, PostgreSQL: ``--rows``, 10,000,000 by default) and
by pipelined stream adds in history_append.lua's layout (Redis: ``--redis-rows``,
1,000,000), the spread of :mod:`benchmarks.history_fill`, then times, per broker:

* ``broker.history()``: page 1 and a deep page (the cursor jumped to the middle of the
  history: keyset pages cost the same at any depth) with no filter, each filter alone
  (name, a rare name, state, queue, a time range, text in the exception, task id) and
  common combinations;
* the dashboard in-process (its ASGI app through Starlette's test client): the history
  page (page 1 draws the charts), a deep history page, ``/history.json``, the charts'
  ``/history/series.json`` and one task's page.

Each is run ``--repeat`` times (fewer when one run takes seconds); the table gives p50 and
p99 (with 20 runs, the p99 is the slowest) and the records a page returned. Pages slower
than ``--slow-ms`` get their EXPLAIN plan printed (SQL brokers).

A filled database is kept and reused by the next run (same ``--rows``): pass ``--refill``
to make it again. Not part of CI: it takes minutes and gigabytes (about 6 GB per SQL
broker at 10 M rows, 0.7 GB of Redis memory at 1 M with the task index).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks import history_fill as fill
from potatoq import Potatoq
from potatoq.brokers.base import Broker, HistoryQuery

PG_SCHEMA = "potatoq_bench_history"
REDIS_PREFIX = "bench-history"


def log(text: str) -> None:
    print(text, flush=True)


@dataclass(frozen=True)
class Case:
    label: str
    query: HistoryQuery


def cases(task_id: str, now: float) -> list[Case]:
    """Every filter alone, then common combinations (each with limit 50, the page's)."""
    hour_ago, three_days = now - 3600, now - 3 * 86400
    top = fill.names()[0][0]
    return [
        Case("no filter", HistoryQuery()),
        Case("name (most common)", HistoryQuery(name=top)),
        Case("name (rare: 1 in 100k)", HistoryQuery(name=fill.RARE_NAME)),
        Case("state FAILURE", HistoryQuery(state="FAILURE")),
        Case("state DEAD", HistoryQuery(state="DEAD")),
        Case("queue reports", HistoryQuery(queue="reports")),
        Case("time: last hour", HistoryQuery(since=hour_ago)),
        Case("time: 1 h, 3 days ago", HistoryQuery(since=three_days, until=three_days + 3600)),
        Case(f"text '{fill.COMMON_TEXT}'", HistoryQuery(text=fill.COMMON_TEXT)),
        Case(f"text '{fill.RARE_TEXT}' (rare)", HistoryQuery(text=fill.RARE_TEXT)),
        Case("task id", HistoryQuery(task_id=task_id)),
        Case("name + state FAILURE", HistoryQuery(name=top, state="FAILURE")),
        Case("queue + state DEAD", HistoryQuery(queue="reports", state="DEAD")),
        Case("name + queue", HistoryQuery(name=top, queue="billing")),
        Case("name + 1 h, 3 days ago", HistoryQuery(name=top, since=three_days, until=three_days + 3600)),
        Case("state FAILURE + text", HistoryQuery(state="FAILURE", text=fill.COMMON_TEXT)),
        Case("name + text", HistoryQuery(name=top, text=fill.COMMON_TEXT)),
        Case(
            "text (rare) + 1 h, 3 days ago",
            HistoryQuery(text=fill.RARE_TEXT, since=three_days, until=three_days + 3600),
        ),
        Case("text (rare) + last hour", HistoryQuery(text=fill.RARE_TEXT, since=hour_ago)),
    ]


def timed(run: Callable[[], int], repeat: int, budget: float = 20.0) -> tuple[list[float], int]:
    """Seconds of each run of ``run`` (at least 3, at most ``repeat``, within ``budget``
    seconds) and the size ``run`` returned last."""
    times: list[float] = []
    size = 0
    began = time.monotonic()
    while len(times) < repeat and (len(times) < 3 or time.monotonic() - began < budget):
        t0 = time.perf_counter()
        size = run()
        times.append(time.perf_counter() - t0)
    return times, size


def pct(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))] * 1000


@dataclass
class Row:
    label: str
    p50: float
    p99: float
    runs: int
    size: str


def table(title: str, rows: list[Row], slow_ms: float) -> None:
    log(f"\n### {title}\n")
    log("| query | p50 ms | p99 ms | runs | page | < 100 ms |")
    log("| --- | ---: | ---: | ---: | --- | --- |")
    for r in rows:
        ok = "yes" if r.p99 < slow_ms else "**no**"
        log(f"| {r.label} | {r.p50:.1f} | {r.p99:.1f} | {r.runs} | {r.size} | {ok} |")


def bench_queries(
    broker: Broker, deep_cursor: str, task_id: str, repeat: int, slow_ms: float,
    explain: Callable[[HistoryQuery], str] | None, only: tuple[str, ...] = (),
) -> list[Row]:  # fmt: skip
    rows: list[Row] = []
    now = time.time()
    for case in cases(task_id, now):
        if only and not any(word in case.label for word in only):
            continue
        deep = replace(case.query, cursor=cursor_for(case.query, deep_cursor))
        for depth, query in (("page 1", case.query), ("deep", deep)):
            if case.query.task_id is not None and depth == "deep":
                continue
            pages: list[Any] = []

            def run(q: HistoryQuery = query, pages: list[Any] = pages) -> int:
                page = broker.history(q)
                pages.append(page)
                return len(page.records)

            times, size = timed(run, repeat)
            more = "+ cursor" if pages[-1].next_cursor is not None else "end"
            rows.append(
                Row(f"{case.label}, {depth}", pct(times, 0.5), pct(times, 0.99), len(times), f"{size} {more}")
            )
            if explain is not None and pct(times, 0.5) >= slow_ms:
                log(f"\nEXPLAIN {case.label}, {depth} (p50 {pct(times, 0.5):.0f} ms):\n{explain(query)}")
    return rows


def bench_dashboard(
    app: Potatoq, deep_cursor: str, task_id: str, repeat: int, only: tuple[str, ...] = ()
) -> list[Row]:
    from starlette.testclient import TestClient

    from potatoq.dashboard import create_app

    client = TestClient(create_app(app, sample_every=0), base_url="http://127.0.0.1")
    top = fill.names()[0][0]
    paths = [
        ("history page 1 (with charts)", "/history"),
        ("history page, deep", f"/history?cursor={cursor_for(HistoryQuery(), deep_cursor)}"),
        ("history page 1, name filter (charts of one name)", f"/history?name={top}"),
        ("history page 1, state FAILURE", "/history?state=FAILURE"),
        ("history.json, text filter", f"/history.json?text={fill.COMMON_TEXT}"),
        ("series.json (charts)", "/history/series.json"),
        ("series.json, one name", f"/history/series.json?name={top}"),
        ("series.json, 6 h", "/history/series.json?window=6h"),
        ("series.json, 24 h", "/history/series.json?window=24h"),
        ("series.json, 24 h, one name", f"/history/series.json?window=24h&name={top}"),
        ("series.json, 7 d", "/history/series.json?window=7d"),
        ("series.json, 7 d, one name", f"/history/series.json?window=7d&name={top}"),
        ("history page 1, 7 d charts", "/history?window=7d"),
        ("task page", f"/tasks/{task_id}"),
    ]
    rows = []
    for label, path in paths:
        if only and not any(word in label for word in only):
            continue

        def get(p: str = path) -> int:
            response = client.get(p)
            response.raise_for_status()
            return len(response.content)

        times, size = timed(get, repeat)
        rows.append(Row(label, pct(times, 0.5), pct(times, 0.99), len(times), f"{size // 1024} KiB"))
    return rows


# -- the brokers ---------------------------------------------------------------------------


@contextlib.contextmanager
def sqlite_app(
    path: Path, rows: int, refill: bool
) -> Iterator[tuple[Potatoq, Callable[[HistoryQuery], str]]]:
    if refill and path.exists():
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    app = Potatoq("bench-history", broker=f"sqlite:///{path}")
    broker = app.broker
    broker.history(HistoryQuery(limit=1))  # creates the schema (migrations)
    conn = sqlite3.connect(path, isolation_level=None)
    have = conn.execute("SELECT count(*) FROM potatoq_history").fetchone()[0]
    if have != rows:
        log(f"SQLite: filling {rows:,} rows into {path} (had {have:,})")
        conn.execute("DELETE FROM potatoq_history")
        indexes = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'potatoq_history' "
            "AND sql IS NOT NULL"
        ).fetchall()
        for name, _ in indexes:  # built once at the end: much faster than row by row
            conn.execute(f'DROP INDEX "{name}"')
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -1000000")

        def execute(sql: str, params: dict[str, Any]) -> None:
            conn.execute("BEGIN")
            conn.execute(sql, params)
            conn.execute("COMMIT")

        fill.fill_sql(execute, "potatoq_history", "sqlite", rows, log)
        for name, sql in indexes:
            t0 = time.monotonic()
            conn.execute(sql)
            log(f"  index {name}: {time.monotonic() - t0:.0f} s")
        conn.execute("DELETE FROM potatoq_history_rollups")
    if not conn.execute("SELECT count(*) FROM potatoq_history_rollups").fetchone()[0]:
        from potatoq.brokers.sqlite.history import rollups_in

        log("SQLite: filling the rollups")
        low, high = conn.execute("SELECT min(seq), max(seq) FROM potatoq_history").fetchone()

        def write(rollups: list[Any]) -> None:
            conn.execute("BEGIN")
            rollups_in(conn, rollups)
            conn.execute("COMMIT")

        source = fill.rollup_source("sqlite", "potatoq_history")
        fill.fill_rollups(
            lambda lo, hi: conn.execute(source, {"lo": lo, "hi": hi}).fetchall(), write, low, high, log
        )
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    log(f"SQLite file: {path.stat().st_size / 2**30:.1f} GiB")

    def explain(query: HistoryQuery) -> str:
        text, params = broker._history_statement(query)
        plan = conn.execute(f"EXPLAIN QUERY PLAN {text}", params).fetchall()
        return "\n".join(f"  {row[-1]}" for row in plan)

    try:
        yield app, explain
    finally:
        conn.close()
        broker.close()


@contextlib.contextmanager
def postgres_app(
    url: str, rows: int, refill: bool, schema: str = PG_SCHEMA
) -> Iterator[tuple[Potatoq, Callable[[HistoryQuery], str]]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        if refill:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    app = Potatoq("bench-history", broker=url)
    app.conf.broker_transport_options = {"schema": schema}
    broker = app.broker
    broker.history(HistoryQuery(limit=1))  # creates the schema (migrations)
    conn = psycopg.connect(url, autocommit=True)
    table_name = f'"{schema}".potatoq_history'
    have = conn.execute(f"SELECT count(*) FROM {table_name}").fetchone()[0]  # type: ignore[index]
    if have != rows:
        log(f"PostgreSQL: filling {rows:,} rows into schema {schema} (had {have:,})")
        conn.execute(f"TRUNCATE {table_name}")
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
            "AND tablename = 'potatoq_history' AND indexname NOT LIKE '%%pkey'",
            (schema,),
        ).fetchall()
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{schema}"."{name}"')
        conn.execute("SET maintenance_work_mem = '512MB'")

        def execute(sql: str, params: dict[str, Any]) -> None:
            conn.execute(sql, params)  # type: ignore[arg-type]

        fill.fill_sql(execute, table_name, "postgres", rows, log)
        for name, sql in indexes:
            t0 = time.monotonic()
            conn.execute(sql)
            log(f"  index {name}: {time.monotonic() - t0:.0f} s")
        conn.execute(f"VACUUM ANALYZE {table_name}")
        conn.execute(f'TRUNCATE "{schema}".potatoq_history_rollups')
    rollups = f'"{schema}".potatoq_history_rollups'
    if not conn.execute(f"SELECT count(*) FROM {rollups}").fetchone()[0]:  # type: ignore[index]
        from potatoq.brokers.history_rollup import rollup_values
        from potatoq.brokers.history_sql import COLUMNS
        from potatoq.brokers.postgres import statements

        log("PostgreSQL: filling the rollups")
        low, high = conn.execute(f"SELECT min(seq), max(seq) FROM {table_name}").fetchone()  # type: ignore[misc]
        upsert = statements.Statements(schema)["history_insert"].text  # no records, only rollups

        def write(found: list[Any]) -> None:
            conn.execute(upsert, {**{c: [] for c in COLUMNS}, **rollup_values(found)})  # type: ignore[arg-type]

        source = fill.rollup_source("postgres", table_name)
        fill.fill_rollups(
            lambda lo, hi: conn.execute(source, {"lo": lo, "hi": hi}).fetchall(),  # type: ignore[arg-type]
            write, low, high, log,
        )  # fmt: skip
        conn.execute(f"VACUUM ANALYZE {rollups}")
    size = conn.execute("SELECT pg_total_relation_size(%s)", (table_name,)).fetchone()[0]  # type: ignore[index]
    log(f"PostgreSQL table with indexes: {size / 2**30:.1f} GiB")

    def explain(query: HistoryQuery) -> str:
        text, params = broker._history_statement(query)
        plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {text}", params).fetchall()  # type: ignore[arg-type]
        return "\n".join(f"  {row[0]}" for row in plan)

    try:
        yield app, explain
    finally:
        conn.close()
        broker.close()


@contextlib.contextmanager
def redis_app(
    url: str, rows: int, refill: bool, prefix: str = REDIS_PREFIX
) -> Iterator[tuple[Potatoq, None]]:
    app = Potatoq("bench-history", broker=url)
    app.conf.broker_transport_options = {"global_keyprefix": prefix}
    broker: Any = app.broker
    client = broker._client()
    hk = broker.keys.history
    if refill or client.xlen(hk) != rows:
        keys = list(client.scan_iter(match=f"{hk}*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        before = client.info("memory")["used_memory"]
        log(f"Redis: appending {rows:,} records to {hk}")
        bucket_size = fill.task_bucket_size(broker.config.history.max_count)
        fill.fill_redis(client, broker.keys.prefix, rows, log, bucket_size)
        used = client.info("memory")["used_memory"] - before
        log(f"Redis memory for {rows:,} records with indexes: {used / 2**20:.0f} MiB")
    elif not client.exists(f"{hk}:minutes"):
        log("Redis: filling the rollups")
        fill.fill_redis_rollups(client, hk, log)
    try:
        yield app, None
    finally:
        broker.close()


def middle_cursor(broker: Broker) -> str:
    """A cursor half-way down the history: the last record of a page from the middle of the
    time span (found by a time range, so it costs no walk)."""
    now = time.time()
    page = broker.history(HistoryQuery(until=now - fill.SPAN / 2, limit=1))
    assert page.records, "no history at the middle of the span"
    return page.records[0].cursor or ""


def cursor_for(query: HistoryQuery, middle: str) -> str:
    """``middle`` as the kind of cursor ``query`` takes: the SQL brokers page a time range
    in finish time order (``<finished_at>/<seq>``), the rest by seq; Redis by stream id."""
    _, slash, seq = middle.partition("/")
    if not slash:
        return middle
    return middle if (query.since or query.until) and not query.task_id else seq


def some_task_id(broker: Broker) -> str:
    page = broker.history(HistoryQuery(until=time.time() - fill.SPAN / 3, limit=1))
    return page.records[0].task_id


def run_broker(
    title: str,
    manager: Any,
    repeat: int,
    slow_ms: float,
    fill_only: bool = False,
    dashboard_only: bool = False,
    only: tuple[str, ...] = (),
) -> None:
    t0 = time.monotonic()
    with manager as (app, explain):
        log(f"{title}: ready in {time.monotonic() - t0:.0f} s; load {os.getloadavg()[0]:.1f}")
        if fill_only:
            return
        broker = app.broker
        cursor, task_id = middle_cursor(broker), some_task_id(broker)
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        if not dashboard_only:
            rows = bench_queries(broker, cursor, task_id, repeat, slow_ms, explain, only)
            table(f"{title}: broker.history() ({started}, load {os.getloadavg()[0]:.1f})", rows, slow_ms)
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        rows = bench_dashboard(app, cursor, task_id, repeat, only)
        if rows:
            table(f"{title}: dashboard ({started}, load {os.getloadavg()[0]:.1f})", rows, slow_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default="sqlite,postgres,redis")
    parser.add_argument("--rows", type=int, default=10_000_000, help="SQL brokers' history rows")
    parser.add_argument("--redis-rows", type=int, default=1_000_000)
    parser.add_argument("--sqlite-path", type=Path, default=Path("/tmp/potatoq-history-scale.sqlite3"))
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("POTATOQ_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test"),
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("POTATOQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--slow-ms", type=float, default=100.0)
    parser.add_argument("--dashboard-only", action="store_true", help="time the dashboard only")
    parser.add_argument("--fill-only", action="store_true", help="fill (if needed) and stop")
    parser.add_argument("--refill", action="store_true", help="fill again even if the sizes match")
    parser.add_argument("--pg-schema", default=PG_SCHEMA, help="PostgreSQL schema to fill and read")
    parser.add_argument("--redis-prefix", default=REDIS_PREFIX, help="Redis key prefix to fill and read")
    parser.add_argument(
        "--cases",
        default="",
        help="time only the queries and dashboard requests whose label holds one of these (comma-separated)",
    )
    args = parser.parse_args()
    wanted = args.brokers.split(",")
    log(f"history scale: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    targets = {
        "sqlite": lambda: (
            f"SQLite, {args.rows:,} records",
            sqlite_app(args.sqlite_path, args.rows, args.refill),
        ),
        "postgres": lambda: (
            f"PostgreSQL, {args.rows:,} records",
            postgres_app(args.postgres_url, args.rows, args.refill, args.pg_schema),
        ),
        "redis": lambda: (
            f"Redis, {args.redis_rows:,} records",
            redis_app(args.redis_url, args.redis_rows, args.refill, args.redis_prefix),
        ),
    }
    for name, target in targets.items():  # in this order, whatever order --brokers gives
        if name in wanted:
            title, app = target()  # the fill runs here, one broker at a time
            only = tuple(word for word in args.cases.split(",") if word)
            run_broker(title, app, args.repeat, args.slow_ms, args.fill_only, args.dashboard_only, only)


if __name__ == "__main__":
    main()
