"""``make bench-expiry``: does PostgreSQL result expiry keep pace with a cluster storing
results at ``--rate`` per second (issue 27: at least 10,000/s)?

A producer thread stores ``--rate`` results a second (a multi-row ``INSERT`` every 0.1 s,
standing in for the settles of a cluster's workers: the question is the deleting, not the
storing) with an expiry of ``--expires`` seconds, for ``--seconds``. Meanwhile ``--nodes``
housekeepers, each a broker of its own as each worker node's supervisor is, sweep every
``--every`` seconds (staggered, like nodes started at different times). Every 5 s the run
samples the table's rows, how many of them are past their expiry, and its size. Expiry
keeps pace when the rows plateau at about ``rate * (expires + every / nodes)``.

Two variants, each in a scratch schema:

* ``batched``: the product's table and its housekeeping (``sweep.sweep_expired``: batched
  deletes through the expiry index);
* ``partitioned``: the same columns in a table partitioned by range of ``expires_at`` (one
  partition per ``--width`` seconds); a sweep creates the partitions of the next minutes
  and drops those wholly past. A partitioned table's primary key must include the
  partition key, so ``task_id`` alone can't be unique there.

Both report the sweep's duration, the producer's slowest insert (a sweep that locks the
table shows there) and the time to read one result by id (``result_get``'s lookup).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, ResultRecord

TICK = 0.1  # seconds between producer inserts
SAMPLE = 5.0  # seconds between samples of the table

INSERT = (
    "INSERT INTO {}.potatoq_results (task_id, state, record, expires_at)"
    " SELECT %(tag)s || i, 'SUCCESS', %(record)s, now() + make_interval(secs => %(expires)s)"
    " FROM generate_series(%(start)s, %(end)s - 1) AS i"
)
PARTITIONED = """
CREATE TABLE {s}.potatoq_results (
    task_id text NOT NULL, state text NOT NULL, record bytea NOT NULL, expires_at timestamptz NOT NULL,
    PRIMARY KEY (task_id, expires_at)
) PARTITION BY RANGE (expires_at);
CREATE INDEX ON {s}.potatoq_results (expires_at);
"""


def _partition_sweep(conn: Any, schema: str, width: int) -> None:
    """Create the partitions of the next 10 minutes (if missing), drop those wholly past."""
    now = int(time.time())
    start = now - now % width
    for lower in range(start, start + 600 + width, width):
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.{} PARTITION OF {}.potatoq_results"
                " FOR VALUES FROM (to_timestamp({})) TO (to_timestamp({}))"
            ).format(
                sql.Identifier(schema),
                sql.Identifier(f"r_{lower}"),
                sql.Identifier(schema),
                sql.Literal(lower),
                sql.Literal(lower + width),
            )
        )
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n ON n.oid = p.relnamespace"
        " WHERE n.nspname = %s AND p.relname = 'potatoq_results'",
        (schema,),
    ).fetchall()
    for (name,) in rows:
        if int(name[2:]) + width <= time.time():
            conn.execute(
                sql.SQL("DROP TABLE IF EXISTS {}.{}").format(sql.Identifier(schema), sql.Identifier(name))
            )


class Run:
    def __init__(self, args: argparse.Namespace, schema: str) -> None:
        self.args, self.schema = args, schema
        self.stop = threading.Event()
        self.produced = 0
        self.insert_s: list[float] = []
        self.sweep_s: list[float] = []
        self.samples: list[tuple[float, int, int, int]] = []  # (t, rows, expired rows, bytes)
        self.lookup_s: list[float] = []
        self.lock = threading.Lock()

    def producer(self) -> None:
        record = ResultRecord(task_id=uuid.uuid4().hex, state="SUCCESS", result=None, date_done=0.0).encode()
        per_tick = int(self.args.rate * TICK)
        statement = sql.SQL(INSERT).format(sql.Identifier(self.schema))
        tag = uuid.uuid4().hex[:8]
        with psycopg.connect(self.args.postgres_url, autocommit=True) as conn:
            next_at = time.monotonic()
            while not self.stop.is_set():
                start = time.perf_counter()
                params = {"tag": tag, "record": record, "expires": float(self.args.expires)}
                conn.execute(statement, {**params, "start": self.produced, "end": self.produced + per_tick})
                self.insert_s.append(time.perf_counter() - start)
                self.produced += per_tick
                # Catch up after a slow insert rather than drift below the rate.
                next_at += TICK
                self.stop.wait(max(0.0, next_at - time.monotonic()))
            self._lookups(conn, tag)

    def _lookups(self, conn: Any, tag: str) -> None:
        statement = sql.SQL(
            "SELECT record FROM {}.potatoq_results WHERE task_id = %s AND expires_at > now()"
        ).format(sql.Identifier(self.schema))
        for i in range(200):
            start = time.perf_counter()
            conn.execute(statement, (f"{tag}{self.produced - 1 - i * 50}",)).fetchall()
            self.lookup_s.append(time.perf_counter() - start)

    def housekeeper(self, offset: float, sweep: Callable[[], None]) -> None:
        if self.stop.wait(offset):
            return
        while not self.stop.is_set():
            start = time.perf_counter()
            sweep()
            with self.lock:
                self.sweep_s.append(time.perf_counter() - start)
            self.stop.wait(self.args.every)

    def sampler(self, t0: float) -> None:
        table = f'"{self.schema}".potatoq_results'
        with psycopg.connect(self.args.postgres_url, autocommit=True) as conn:
            while not self.stop.wait(SAMPLE):
                row = conn.execute(
                    sql.SQL(
                        "SELECT count(*), count(*) FILTER (WHERE expires_at < now()),"
                        " (SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits"
                        "  WHERE inhparent = %s::regclass) + pg_total_relation_size(%s::regclass)"
                        " FROM {}.potatoq_results"
                    ).format(sql.Identifier(self.schema)),
                    (table, table),
                ).fetchone()
                assert row is not None
                self.samples.append((time.monotonic() - t0, int(row[0]), int(row[1]), int(row[2])))


def measure(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    schema = f"pq_expiry_{uuid.uuid4().hex[:8]}"
    brokers = [
        create_broker(BrokerConfig(url=args.postgres_url, transport_options={"schema": schema}))
        for _ in range(args.nodes)
    ]
    conns: list[Any] = []
    try:
        if variant == "batched":
            brokers[0].migrate()
            sweeps = [getattr(b, "_housekeeping") for b in brokers]  # noqa: B009
        else:
            with psycopg.connect(args.postgres_url, autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
                conn.execute(sql.SQL(PARTITIONED.format(s="{s}")).format(s=sql.Identifier(schema)))
                _partition_sweep(conn, schema, args.width)
            conns = [psycopg.connect(args.postgres_url, autocommit=True) for _ in range(args.nodes)]
            sweeps = [lambda c=c: _partition_sweep(c, schema, args.width) for c in conns]
        run = Run(args, schema)
        load_before = os.getloadavg()
        t0 = time.monotonic()
        threads = [threading.Thread(target=run.producer), threading.Thread(target=run.sampler, args=(t0,))]
        threads += [
            threading.Thread(target=run.housekeeper, args=(i * args.every / args.nodes, sweep))
            for i, sweep in enumerate(sweeps)
        ]
        for thread in threads:
            thread.start()
        time.sleep(args.seconds)
        run.stop.set()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - t0
        return _summary(variant, run, elapsed, load_before)
    finally:
        for broker in brokers:
            broker.close()
        for conn in conns:
            conn.close()
        with psycopg.connect(args.postgres_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _summary(variant: str, run: Run, elapsed: float, load_before: tuple[float, ...]) -> dict[str, Any]:
    rows = [s[1] for s in run.samples]
    half = len(rows) // 2
    last = run.samples[-1] if run.samples else (0.0, 0, 0, 0)
    return {
        "variant": variant,
        "produced/s": run.produced / elapsed,
        "deleted/s": (run.produced - last[1]) / elapsed,
        "peak rows, first half": max(rows[:half], default=0),
        "peak rows, second half": max(rows[half:], default=0),
        "peak expired rows waiting": max((s[2] for s in run.samples), default=0),
        "peak table MB, first half": max((s[3] for s in run.samples[:half]), default=0) / 1e6,
        "peak table MB, second half": max((s[3] for s in run.samples[half:]), default=0) / 1e6,
        "sweeps": len(run.sweep_s),
        "sweep median s": statistics.median(run.sweep_s) if run.sweep_s else 0.0,
        "sweep max s": max(run.sweep_s, default=0.0),
        "insert p99 ms": sorted(run.insert_s)[int(0.99 * (len(run.insert_s) - 1))] * 1000,
        "insert max ms": max(run.insert_s) * 1000,
        "lookup by id median ms": statistics.median(run.lookup_s) * 1000,
        "load": [load_before, os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--rate", type=int, default=10_000, help="results stored per second")
    parser.add_argument("--expires", type=float, default=30.0, help="result_expires, seconds")
    parser.add_argument("--nodes", type=int, default=3, help="housekeeping worker nodes")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between one node's sweeps")
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--width", type=int, default=10, help="partitioned: seconds per partition")
    parser.add_argument("--variants", default="batched,partitioned")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("POTATOQ_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test"),
    )
    args = parser.parse_args()
    print(f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; cpus {os.cpu_count()}")
    print(
        f"{args.rate:,} results/s expiring after {args.expires:g} s, {args.nodes} nodes sweeping every"
        f" {args.every:g} s, {args.seconds:g} s per variant"
    )
    outs = [measure(args, variant) for variant in args.variants.split(",")]
    print("\n| figure | " + " | ".join(o["variant"] for o in outs) + " |")
    print("|---|" + "---:|" * len(outs))
    for key in outs[0]:
        if key in ("variant", "load"):
            continue
        print(f"| {key} | " + " | ".join(f"{o[key]:,.1f}" for o in outs) + " |")
    for o in outs:
        before, after = (" ".join(f"{x:.2f}" for x in load) for load in o["load"])
        print(f"{o['variant']}: load average {before} before, {after} after")


if __name__ == "__main__":
    main()
