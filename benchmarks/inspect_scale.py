"""``make bench-inspect-scale``: do the inspection commands answer fast behind a huge backlog?

Issue 27's target: behind 1,000,000 ready + 1,000,000 far-future delayed tasks (plus up to
10,000,000 stored results on the SQL brokers), ``potatoq queues``, ``potatoq status``, the
dashboard overview and ``/metrics`` each answer in under 100 ms; a purge of a 1,000,000-task
queue doesn't stop the broker for others. Per broker, in one run:

1. fill the backlog by bulk SQL (SQLite, PostgreSQL) or the broker's own batched enqueue
   (Redis, RabbitMQ: ready tasks only, its delayed tasks sit in the shared delay cascade,
   which ``queue_stats()`` doesn't count) in three queues: ``big`` (80 % of the ready and
   20 % of the delayed tasks: 1,000,000 at the default sizes, the purge target), ``q1``
   and ``q2``;
2. time, ``--calls`` times each: ``queue_stats()``, ``potatoq queues`` and ``potatoq
   status`` called in-process (``potatoq.cli.main`` with the app), the dashboard overview
   (``/``, and the partial page its live refresh fetches) and ``/metrics`` through the
   ASGI app in-process; then the whole ``potatoq status`` command as a process (``-A``
   app module), beside ``potatoq --version`` (the interpreter and import cost alone);
3. compare each count with the number filled (exact, or the estimate's error);
4. purge ``big`` while a probe thread on its own connection enqueues one task to another
   queue in a loop: the purge's time and the probe's longest enqueue (against its longest
   in 2 s alone before) show how long the purge kept others out.

Prints one markdown table per broker. Not part of CI: it needs minutes and gigabytes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from potatoq.message import Message, new_id

# The share of the ready and of the delayed tasks each queue gets.
LAYOUT = {"big": (0.80, 0.20), "q1": (0.15, 0.50), "q2": (0.05, 0.30)}


@dataclass
class Target:
    """One broker under test: how to reach it, fill it and clean it up."""

    name: str
    url: str
    options: dict[str, Any]
    fill: Callable[[Any, int, int, int], None]
    cleanup: Callable[[], None] = lambda: None
    delayed_counted: bool = True
    results: bool = True
    notes: list[str] = field(default_factory=list)


def split(total: int, column: int) -> dict[str, int]:
    """``total`` tasks shared among the queues as LAYOUT says (the rounding goes to big)."""
    out = {q: int(total * shares[column]) for q, shares in LAYOUT.items()}
    out["big"] += total - sum(out.values())
    return out


def _payload() -> bytes:
    return Message(id=new_id(), task="bench.noop", queue="big").encode()


# -- fill, per broker ---------------------------------------------------------------------------


def fill_sqlite(path: Path) -> Callable[[Any, int, int, int], None]:
    def fill(broker: Any, ready: int, delayed: int, results: int) -> None:
        import sqlite3

        broker.migrate()
        now = time.time()
        conn = sqlite3.connect(path)
        with conn:
            for kind, counts in (("r", split(ready, 0)), ("d", split(delayed, 1))):
                for queue, n in counts.items():
                    conn.execute(
                        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :k - 1)"
                        " INSERT INTO potatoq_jobs (id, queue, state, run_at, payload)"
                        " SELECT :tag || i, :queue, :state, :run_at, :payload FROM n",
                        {
                            "k": n,
                            "tag": f"{kind}-{queue}-",
                            "queue": queue,
                            "state": 1 if kind == "r" else 0,
                            "run_at": now if kind == "r" else now + 3e7,
                            "payload": _payload(),
                        },
                    )
        if results:
            with conn:
                conn.execute(
                    "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :k - 1)"
                    " INSERT INTO potatoq_results (task_id, state, payload, expires_at)"
                    " SELECT 'res-' || i, 'SUCCESS', :payload, :now + 86400 FROM n",
                    {"k": results, "now": now, "payload": _payload()},
                )
        conn.execute("ANALYZE")
        # fold the fill's write-ahead log into the file now, or the first write after it
        # (the purge probe's) pays for a multi-gigabyte checkpoint
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()

    return fill


def fill_postgres(broker: Any, ready: int, delayed: int, results: int) -> None:
    import psycopg
    from psycopg import sql

    broker.migrate()
    schema = sql.Identifier(broker.options.schema)
    with psycopg.connect(broker.config.url, autocommit=True) as conn:
        for kind, counts in (("r", split(ready, 0)), ("d", split(delayed, 1))):
            for queue, n in counts.items():
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.potatoq_jobs (id, queue, state, run_at, payload)"
                        " SELECT %(tag)s || i, %(queue)s, %(state)s,"
                        " now() + %(later)s * interval '1 year', %(payload)s"
                        " FROM generate_series(0, %(k)s - 1) AS i"
                    ).format(schema),
                    {
                        "k": n,
                        "tag": f"{kind}-{queue}-",
                        "queue": queue,
                        "state": 1 if kind == "r" else 0,
                        "later": 0 if kind == "r" else 1,
                        "payload": _payload(),
                    },
                )
        if results:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.potatoq_results (task_id, state, record, expires_at)"
                    " SELECT 'res-' || i, 'SUCCESS', %(payload)s, now() + interval '1 day'"
                    " FROM generate_series(0, %(k)s - 1) AS i"
                ).format(schema),
                {"k": results, "payload": _payload()},
            )
        for table in ("potatoq_jobs", "potatoq_results"):
            conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(schema, sql.Identifier(table)))


def fill_by_enqueue(broker: Any, ready: int, delayed: int, results: int) -> None:
    """The broker's own batched enqueue (Redis: one Lua call per 1,000 messages)."""
    later = time.time() + 3e7
    for column, eta in ((0, None), (1, later)):
        for queue, n in split(ready if column == 0 else delayed, column).items():
            for start in range(0, n, 1000):
                broker.enqueue(
                    [
                        Message(id=new_id(), task="bench.noop", queue=queue, eta=eta)
                        for _ in range(min(1000, n - start))
                    ]
                )


# -- timing ---------------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], calls: int) -> list[float]:
    fn()  # warm: connections, statement caches, templates
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f} / {p99(values) * 1000:.1f}"


def cli_call(app: Any, argv: list[str]) -> Callable[[], None]:
    from potatoq.cli import main

    def call() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            main(argv, app=app)

    return call


def whole_command(module_dir: Path, argv: list[str], calls: int) -> list[float]:
    exe = str(Path(sys.executable).with_name("potatoq"))
    env = {**os.environ, "PYTHONPATH": str(module_dir)}
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        subprocess.run([exe, *argv], cwd=module_dir, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return times


def probe(make: Callable[[], Any], stop: threading.Event, waits: list[float], errors: list[str]) -> None:
    """Enqueue one task to queue ``probe`` in a loop on its own broker; record each wait, and
    each refusal (Redis answers BUSY while a script runs longer than its time limit)."""
    broker = make()
    try:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                broker.enqueue([Message(id=new_id(), task="bench.noop", queue="probe")])
            except Exception as exc:
                errors.append(type(exc).__name__)
            waits.append(time.perf_counter() - start)
            time.sleep(0.002)
    finally:
        broker.close()


def probed(make: Callable[[], Any], action: Callable[[], Any]) -> tuple[Any, float, list[float], list[str]]:
    stop = threading.Event()
    waits: list[float] = []
    errors: list[str] = []
    thread = threading.Thread(target=probe, args=(make, stop, waits, errors))
    thread.start()
    time.sleep(0.2)
    start = time.perf_counter()
    value = action()
    seconds = time.perf_counter() - start
    stop.set()
    thread.join()
    return value, seconds, waits, errors


def refused(errors: list[str]) -> str:
    return f", {len(errors)} refused: {', '.join(sorted(set(errors)))}" if errors else ""


# -- one broker -----------------------------------------------------------------------------------


def run(target: Target, args: argparse.Namespace) -> None:
    from starlette.testclient import TestClient

    from potatoq import Potatoq
    from potatoq.brokers import create_broker
    from potatoq.brokers.base import BrokerConfig
    from potatoq.dashboard import create_app

    def make() -> Any:
        return create_broker(BrokerConfig(url=target.url, transport_options=target.options))

    rows: list[tuple[str, str]] = []
    app = Potatoq("bench", broker=target.url, broker_transport_options=target.options, set_as_current=False)
    broker = app.broker
    results = args.results if target.results else 0
    started = time.strftime("%H:%M", time.gmtime())
    load = os.getloadavg()
    start = time.perf_counter()
    target.fill(broker, args.ready, args.delayed, results)
    rows.append(("fill", f"{time.perf_counter() - start:.0f} s"))

    stats = {s.queue: s for s in broker.queue_stats()}
    for column, field_name in ((0, "waiting"), (1, "delayed")):
        if column == 1 and not target.delayed_counted:
            continue
        for queue, n in split(args.ready if column == 0 else args.delayed, column).items():
            got = stats.get(queue)
            value = 0 if got is None else getattr(got, field_name)
            if got is not None and field_name in got.estimated:
                error = (value - n) / n * 100 if n else 0.0
                rows.append((f"{queue} {field_name}", f"≈{value:,} (estimate, {error:+.1f} % off {n:,})"))
            else:
                rows.append((f"{queue} {field_name}", f"{value:,} (exact{'' if value == n else ', WRONG'})"))

    calls = args.calls
    rows.append(("`queue_stats()` ms, median / p99", ms(timed(broker.queue_stats, calls))))
    cap = getattr(broker, "stats_exact_cap", None)
    if cap is not None:  # the same call counting every entry, as before the cap (same run)
        broker.stats_exact_cap = 10**12
        rows.append(
            ("... exact counts of everything (no cap), for comparison", ms(timed(broker.queue_stats, 5)))
        )
        broker.stats_exact_cap = cap
    rows.append(("`potatoq queues` in-process", ms(timed(cli_call(app, ["queues"]), calls))))
    rows.append(("`potatoq status` in-process", ms(timed(cli_call(app, ["status"]), calls))))
    client = TestClient(create_app(app, sample_every=0), base_url="http://127.0.0.1")
    for label, path, headers in (
        ("dashboard overview `/`", "/", {}),
        ("dashboard overview, live refresh (partial)", "/", {"X-Potatoq-Partial": "1"}),
        ("`/metrics`", "/metrics", {}),
    ):
        assert client.get(path, headers=headers).status_code == 200, path
        rows.append((label, ms(timed(lambda p=path, h=headers: client.get(p, headers=h), calls))))

    with tempfile.TemporaryDirectory() as tmp:
        module = Path(tmp)
        (module / "benchapp.py").write_text(
            "from potatoq import Potatoq\n"
            f"app = Potatoq('bench', broker={target.url!r}, broker_transport_options={target.options!r})\n"
        )
        runs = max(3, calls // 4)
        rows.append(
            (
                "whole `potatoq -A benchapp status` process",
                ms(whole_command(module, ["-A", "benchapp", "status"], runs)),
            )
        )
        rows.append(
            ("... `potatoq --version` alone (startup)", ms(whole_command(module, ["--version"], runs)))
        )

    _, _, baseline, _ = probed(make, lambda: time.sleep(2.0))
    deleted, seconds, waits, errors = probed(make, lambda: broker.purge(["big"]))
    rows.append(("purge `big`", f"{deleted:,} tasks in {seconds:.1f} s ({deleted / seconds:,.0f}/s)"))
    rows.append(
        (
            "longest probe enqueue: alone 2 s / during the purge",
            (
                f"{max(baseline) * 1000:.0f} ms / {max(waits) * 1000:.0f} ms"
                f" ({len(waits)} enqueues{refused(errors)})"
            ),
        )
    )
    rows.append(("`queue_stats()` after the purge", ms(timed(broker.queue_stats, calls))))
    batch = getattr(broker, "purge_batch", None)
    if batch is not None:  # as before the batches: q1 in one statement / script (same run)
        broker.purge_batch = 10**9
        deleted, seconds, waits, errors = probed(make, lambda: broker.purge(["q1"]))
        broker.purge_batch = batch
        rows.append(
            (
                "purge `q1` in one transaction (as before), for comparison",
                f"{deleted:,} tasks in {seconds:.1f} s",
            )
        )
        rows.append(
            (
                "... longest probe enqueue during it",
                f"{max(waits) * 1000:.0f} ms ({len(waits)} enqueues{refused(errors)})",
            )
        )
    ended = time.strftime("%H:%M", time.gmtime())
    end_load = os.getloadavg()
    client.close()
    app.close() if hasattr(app, "close") else broker.close()

    print(f"\n### {target.name}\n")
    print(
        f"{time.strftime('%Y-%m-%d')} {started}-{ended} UTC, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        f" before, {end_load[0]:.2f} {end_load[1]:.2f} {end_load[2]:.2f} after; {args.ready:,} ready +"
        f" {args.delayed if target.delayed_counted else 0:,} delayed tasks, {results:,} results;"
        f" {calls} calls each (p99 = slowest)."
    )
    for note in target.notes:
        print(note)
    print("\n| figure | value |\n|---|---:|")
    for label, value in rows:
        print(f"| {label} | {value} |")
    sys.stdout.flush()


# -- targets --------------------------------------------------------------------------------------


@contextlib.contextmanager
def sqlite_target(args: argparse.Namespace) -> Iterator[Target]:
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        path = Path(tmp) / "inspect.sqlite3"
        yield Target("SQLite", f"sqlite:///{path}", {}, fill_sqlite(path))


@contextlib.contextmanager
def postgres_target(args: argparse.Namespace) -> Iterator[Target]:
    import psycopg
    from psycopg import sql

    url = os.environ.get("POTATOQ_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test")
    schema = f"bench_inspect_{uuid.uuid4().hex[:8]}"
    try:
        yield Target("PostgreSQL", url, {"schema": schema}, fill_postgres)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextlib.contextmanager
def redis_target(args: argparse.Namespace) -> Iterator[Target]:
    import redis

    url = os.environ.get("POTATOQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    prefix = f"bench-inspect-{uuid.uuid4().hex[:8]}"
    try:
        yield Target("Redis", url, {"global_keyprefix": prefix}, fill_by_enqueue, results=False)
    finally:
        client = redis.Redis.from_url(url)
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{prefix}*", count=10_000):
            batch.append(key)
            if len(batch) >= 10_000:
                client.unlink(*batch)
                batch = []
        if batch:
            client.unlink(*batch)


@contextlib.contextmanager
def rabbitmq_target(args: argparse.Namespace) -> Iterator[Target]:
    url = os.environ.get("POTATOQ_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
    prefix = f"bench-inspect-{uuid.uuid4().hex[:8]}-"
    target = Target(
        "RabbitMQ",
        url,
        {"queue_prefix": prefix},
        fill_by_enqueue,
        delayed_counted=False,
        results=False,
        notes=[
            "Ready messages only (`--delayed` is not filled: RabbitMQ's stats don't count the delay cascade)."
        ],
    )
    try:
        yield target
    finally:
        from potatoq.brokers import create_broker
        from potatoq.brokers.base import BrokerConfig

        broker = create_broker(BrokerConfig(url=url, transport_options={"queue_prefix": prefix}))
        with contextlib.suppress(Exception):
            broker.drop_all()  # type: ignore[attr-defined]
        broker.close()


TARGETS = {
    "sqlite": sqlite_target,
    "postgres": postgres_target,
    "redis": redis_target,
    "rabbitmq": rabbitmq_target,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default="sqlite,postgres,redis,rabbitmq")
    parser.add_argument("--ready", type=int, default=1_000_000)
    parser.add_argument("--delayed", type=int, default=1_000_000)
    parser.add_argument("--results", type=int, default=10_000_000, help="stored results (SQL brokers)")
    parser.add_argument("--rabbitmq-ready", type=int, default=1_000_000, help="RabbitMQ's ready tasks")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--tmp", default=None, help="directory for the SQLite file")
    args = parser.parse_args(argv)
    for name in args.brokers.split(","):
        with TARGETS[name](args) as target:
            run_args = args
            if name == "rabbitmq":
                run_args = argparse.Namespace(**{**vars(args), "ready": args.rabbitmq_ready, "delayed": 0})
            run(target, run_args)


if __name__ == "__main__":
    main()
