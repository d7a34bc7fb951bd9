"""The idle latency any PostgreSQL queue with a durable enqueue and LISTEN wake-ups pays here.

    python -m benchmarks.pg_floor ADMIN_URL [--samples 200] [--seconds 10] [--gap-ms 5,40]

No queue library runs, only psycopg: a producer sends each sample as one autocommit
statement of the shape of potatoq's single ``delay()`` (an INSERT and its ``pg_notify``
together, committed durably), and a consumer in another process waits in LISTEN, and on each
wake-up claims the row with one ``UPDATE ... FOR UPDATE SKIP LOCKED`` committed without
waiting for the WAL flush (as potatoq's idle claim does), then takes the time. The samples
are paced as ``benchmarks.drive latency`` paces them. What this measures is the floor under
any such queue on this machine: the server's durable commit, the NOTIFY delivery, one claim
round trip and two process wake-ups. ``benchmarks.run`` reports it beside potatoq's idle
latency on PostgreSQL.

Prints JSON: ``latency`` (seconds from before the producer's statement to the consumer
holding the row) and ``commit`` (the producer's statement alone), one value per sample. It
works in a database of its own, ``bench_floor``, dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

DATABASE = "bench_floor"
CHANNEL = "bench_floor"
SCHEMA = (
    "CREATE TABLE jobs (id bigserial PRIMARY KEY, state smallint NOT NULL DEFAULT 1, sent float8 NOT NULL)",
    "CREATE INDEX jobs_ready ON jobs (id) WHERE state = 1",
)
ENQUEUE = (
    "WITH ins AS (INSERT INTO jobs (sent) VALUES (%s) RETURNING id) "
    f"SELECT pg_notify('{CHANNEL}', '') FROM ins"
)
CLAIM = (
    "WITH next AS MATERIALIZED (SELECT id FROM jobs WHERE state = 1 ORDER BY id"
    " FOR UPDATE SKIP LOCKED LIMIT 1)"
    " UPDATE jobs SET state = 2 FROM next WHERE jobs.id = next.id"
    " AND set_config('synchronous_commit', 'off', true) = 'off' RETURNING jobs.sent"
)


def _consume(url: str, ready: Any, out: Any, samples: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        ready.set()
        taken = 0
        while taken < samples:
            for _ in conn.notifies(timeout=1.0, stop_after=1):
                break
            while True:  # drain: one wake-up may stand for several rows
                with conn.transaction():
                    row = conn.execute(CLAIM).fetchone()
                if row is None:
                    break
                out.put(time.time() - row[0])
                taken += 1


def measure(
    admin_url: str, samples: int, seconds: float, gap_ms: tuple[float, float]
) -> dict[str, list[float]]:
    url = urlunsplit(urlsplit(admin_url)._replace(path=f"/{DATABASE}"))
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    consumer = ctx.Process(target=_consume, args=(url, ready, out, samples), daemon=True)
    latency: list[float] = []
    commit: list[float] = []
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in SCHEMA:
                conn.execute(statement)
            consumer.start()
            if not ready.wait(60):
                raise SystemExit("the LISTEN consumer didn't start within 60 s")
            conn.execute("SELECT 1")  # the connection is warm before the first sample
            rng = random.Random(7)
            stop = time.monotonic() + seconds
            for _ in range(samples):
                sent = time.time()
                conn.execute(ENQUEUE, (sent,))
                commit.append(time.time() - sent)
                latency.append(out.get(timeout=30))
                if time.monotonic() > stop:
                    break
                time.sleep(rng.uniform(*gap_ms) / 1000)
    finally:
        consumer.kill()
        consumer.join(10)
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    return {"latency": latency, "commit": commit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="an admin connection (any database)")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--gap-ms", default="5,40", help="pause between samples, uniform in MIN,MAX ms")
    args = parser.parse_args()
    low, high = (float(x) for x in args.gap_ms.split(","))
    print(json.dumps(measure(args.url, args.samples, args.seconds, (low, high))))


if __name__ == "__main__":
    main()
