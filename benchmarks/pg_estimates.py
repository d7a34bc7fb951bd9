"""``make bench-pg-estimates``: how far off PostgreSQL's queue-count estimates are, by layout.

``queue_stats()`` counts each queue's ready, parked and scheduled tasks exactly up to a cap
and estimates past it (potatoq/brokers/estimates.py). How far off an estimate can be
depends on where a queue's tasks lie, so the backlog of ``make bench-inspect-scale``
(1,000,000 ready + 1,000,000 delayed in three queues: ``big`` 80 % / 20 %, ``q1`` 15 % /
50 %, ``q2`` 5 % / 30 %) is filled by bulk SQL three times, in a private schema each:

* ``runs``: each queue's tasks inserted one queue after the other (a bulk load, or a long
  outage of one producer: one run of seq and of table pages per queue and kind);
* ``interleaved``: every task's queue drawn at random (many producers at once);
* ``bursts``: the queue drawn at random per burst of ``--burst`` tasks (producers that
  enqueue in batches).

On each, ``--reads`` times, alternating: the estimate this version makes (windows of seq
in each queue's own index entries) and the one it replaced (``TABLESAMPLE SYSTEM`` of 1,000
pages, scaled to the table), each against the exact counts; the time of each (wall, and the
CPU time of this process and of its PostgreSQL backend, which a loaded machine inflates
less than the wall time). Prints markdown tables. Not part of CI.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.inspect_scale import LAYOUT, _payload
from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig

URL = os.environ.get("POTATOQ_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test")
TICK = os.sysconf("SC_CLK_TCK")
KINDS = ("ready", "scheduled")

# The queue of row i, as a value in [0, 1) compared with the cumulative shares.
DRAW = {
    "runs": None,  # one INSERT per queue instead
    "interleaved": "random()",
    "bursts": "(('x' || substr(md5((i / %(burst)s)::text || %(tag)s), 1, 8))::bit(32)::bigint"
    " / 4294967296.0)",
}


def fill(
    conn: psycopg.Connection[Any], schema: str, layout: str, ready: int, delayed: int, burst: int
) -> None:
    s = sql.Identifier(schema)
    for state, total, column in ((1, ready, 0), (0, delayed, 1)):
        params = {
            "state": state,
            "later": 1 - state,
            "payload": _payload(),
            "burst": burst,
            "tag": f"{state}",
        }
        if layout == "runs":
            for queue, shares in LAYOUT.items():
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.potatoq_jobs (id, queue, state, run_at, payload)"
                        " SELECT %(tag)s || %(queue)s || i, %(queue)s, %(state)s,"
                        " now() + %(later)s * interval '1 year', %(payload)s"
                        " FROM generate_series(1, %(n)s) AS i"
                    ).format(s),
                    {**params, "queue": queue, "n": int(total * shares[column])},
                )
            continue
        bounds, cumulative = [], 0.0
        for queue, shares in LAYOUT.items():
            cumulative += shares[column]
            bounds.append((cumulative, queue))
        case = " ".join(f"WHEN r < {bound!r} THEN '{queue}'" for bound, queue in bounds[:-1])
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.potatoq_jobs (id, queue, state, run_at, payload)"
                " SELECT %(tag)s || '-' || i, CASE " + case + " ELSE '" + bounds[-1][1] + "' END,"
                " %(state)s, now() + %(later)s * interval '1 year', %(payload)s"
                " FROM (SELECT i, " + DRAW[layout] + " AS r FROM generate_series(1, %(n)s) AS i) AS g"
            ).format(s),
            {**params, "n": total},
        )
    conn.execute(sql.SQL("VACUUM ANALYZE {}.potatoq_jobs").format(s))


def backend_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def page_sample(conn: psycopg.Connection[Any], schema: str) -> dict[tuple[str, str], float]:
    """The estimate this version replaced: 1,000 random pages of the table, scaled up."""
    table = f"{sql.Identifier(schema).as_string(conn)}.potatoq_jobs"
    row = conn.execute(
        "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::bigint", (table,)
    ).fetchone()
    percent = min(100.0, 100.0 * 1000 / int(row[0])) if row else 100.0
    rows = conn.execute(
        sql.SQL(
            "SELECT queue, CASE WHEN state = 0 THEN 'scheduled' ELSE 'ready' END, count(*)"
            " FROM {}.potatoq_jobs TABLESAMPLE SYSTEM (%s) WHERE state IN (0, 1) GROUP BY 1, 2"
        ).format(sql.Identifier(schema)),
        (percent,),
    ).fetchall()
    return {(queue, kind): n * 100.0 / percent for queue, kind, n in rows}


def measure(layout: str, args: argparse.Namespace) -> None:
    schema = f"bench_est_{layout}_{os.getpid()}"
    broker = create_broker(BrokerConfig(url=URL, transport_options={"schema": schema}))
    try:
        broker.migrate()
        with psycopg.connect(URL, autocommit=True) as conn:
            start = time.monotonic()
            fill(conn, schema, layout, args.ready, args.delayed, args.burst)
            filled = time.monotonic() - start
            truth = {
                (queue, "ready" if state == 1 else "scheduled"): n
                for queue, state, n in conn.execute(
                    sql.SQL("SELECT queue, state, count(*) FROM {}.potatoq_jobs GROUP BY 1, 2").format(
                        sql.Identifier(schema)
                    )
                )
            }

            def windows() -> dict[tuple[str, str], float]:
                with conn.transaction():  # with the settings queue_stats() reads them with
                    conn.execute(broker._statements()["queue_stats_settings"].query)  # type: ignore[attr-defined]
                    return {key: broker._estimate(conn, *key) for key in truth}  # type: ignore[attr-defined]

            methods: dict[str, Callable[[], dict[tuple[str, str], float]]] = {
                "pages": lambda: page_sample(conn, schema),
                "windows": windows,
            }
            errors: dict[str, dict[tuple[str, str], list[float]]] = {m: {} for m in methods}
            walls: dict[str, list[float]] = {m: [] for m in methods}
            cpus: dict[str, float] = dict.fromkeys(methods, 0.0)
            pid = conn.info.backend_pid
            load_before = os.getloadavg()
            for i in range(args.reads):
                for name in list(methods) if i % 2 == 0 else list(methods)[::-1]:
                    cpu0, own0, wall0 = backend_cpu(pid), time.process_time(), time.perf_counter()
                    estimate = methods[name]()
                    walls[name].append((time.perf_counter() - wall0) * 1000)
                    cpus[name] += backend_cpu(pid) - cpu0 + time.process_time() - own0
                    for key, n in truth.items():
                        errors[name].setdefault(key, []).append(100.0 * (estimate.get(key, 0.0) / n - 1))
            load_after = os.getloadavg()
    finally:
        broker.close()
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    loads = " ".join(f"{x:.2f}" for x in load_before), " ".join(f"{x:.2f}" for x in load_after)
    print(f"\n#### {layout}\n")
    print(
        f"{stamp}, load {loads[0]} before, {loads[1]} after; fill {filled:.0f} s; {args.reads} reads each.\n"
    )
    print("| queue, kind | tasks | page sample: error mean (sd), worst | windows: error mean (sd), worst |")
    print("|---|---:|---:|---:|")
    for key in sorted(truth, key=lambda k: (k[1], -truth[k])):
        cells = []
        for name in methods:
            e = errors[name][key]
            cells.append(
                f"{statistics.mean(e):+.1f} % ({statistics.pstdev(e):.1f}), {max(e, key=abs):+.1f} %"
            )
        print(f"| {key[0]} {key[1]} | {truth[key]:,} | {cells[0]} | {cells[1]} |")
    print("\n| estimate of all six counts | ms per read: wall median / slowest | CPU ms per read (mean) |")
    print("|---|---:|---:|")
    for name, label in (("pages", "page sample (before)"), ("windows", "windows of seq (now)")):
        wall = f"{statistics.median(walls[name]):.1f} / {max(walls[name]):.1f}"
        print(f"| {label} | {wall} | {1000 * cpus[name] / args.reads:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layouts", default="runs,interleaved,bursts")
    parser.add_argument("--ready", type=int, default=1_000_000)
    parser.add_argument("--delayed", type=int, default=1_000_000)
    parser.add_argument("--burst", type=int, default=1_000, help="tasks per burst (bursts layout)")
    parser.add_argument("--reads", type=int, default=20)
    args = parser.parse_args()
    for layout in args.layouts.split(","):
        measure(layout, args)


if __name__ == "__main__":
    main()
