"""What tasks waiting on a limit cost the unlimited tasks beside them (issue 29: under 10 %
of processed/s), measured so that it settles on a shared, drifting machine:

    python -m benchmarks.limits_cost [--brokers sqlite,postgres,redis,rabbitmq] [--pairs 12]
                                     [-n 1500] [--limited 500]

Per broker, ``--pairs`` pairs of short runs of potatoq's real worker (2 processes), on fresh
storage each: ``-n`` no-op tasks sent in batches, without (A) and with (B) ``--limited``
``held`` tasks under a rate limit of 1/h sent into the same queue first (one runs, the rest
wait for the whole run; ``BENCH_LIMITED`` in :mod:`benchmarks.peers.potatoq_app`). Each run
gives processed/s (first completion to last) and the workers' CPU time per task. The two
runs of a pair go back to back, in alternating order (AB, BA, AB, ...), so a slow spell of
the machine falls on both runs of a pair and on each side equally often.

The report gives, per broker, the median of the per-pair ratios B ÷ A for processed/s and
for CPU per task, each with a distribution-free 95 % confidence interval of that median
(from the order statistics of the ratios, binomial ranks), and the load averages seen. A
cost under 10 % means the processed/s ratio's interval lies above 0.90 (and the CPU ratio's
below 1.10). On RabbitMQ both runs of every pair have a Redis result backend (where its
limits live, ``--redis-url``) and ignore results.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from . import record
from .run import DEFAULT_URLS, Case, Workers, _drive, _record_env
from .servers import SERVERS, Server

BROKERS = ("sqlite", "postgres", "redis", "rabbitmq")


def one_run(case: Case, server: Server, n: int, tmp: Path, extra: Sequence[str]) -> tuple[float, float]:
    """processed/s and worker CPU µs per task of one run of ``case`` on fresh storage."""
    base = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), **case.env}
    base.pop("BENCH_URL", None)
    storage = {**base, **server.fresh(case.system, "limits")}
    workers: Workers | None = None
    try:
        _drive(case, storage, "enqueue", case.module, str(n), "--batch", "100")
        done_path, started_path = tmp / "limits.done", tmp / "limits.started"
        for path in (done_path, started_path):
            path.unlink(missing_ok=True)
        env = {**storage, **_record_env(done_path, started_path)}
        workers = Workers(case, env, tmp / "limits.log", extra)
        deadline = time.monotonic() + 120
        first_cpu, first_count = 0.0, 0
        while True:
            count = record.count_done(str(done_path))
            if count and not first_count:
                first_cpu, first_count = workers.cpu_seconds(), count
            if count >= n:
                break
            if workers.died() or time.monotonic() > deadline:
                raise RuntimeError(f"{count}/{n} tasks done:\n{workers.tail()}")
            time.sleep(0.01)
        cpu_us = (workers.cpu_seconds() - first_cpu) / max(count - first_count, 1) * 1e6
        stamps = sorted(float(line) for line in done_path.read_bytes().split())
        return (len(stamps) - 1) / max(stamps[-1] - stamps[0], 1e-9), cpu_us
    finally:
        if workers is not None:
            workers.stop()
        with contextlib.suppress(Exception):
            server.drop(case.system, storage)


def _retried(case: Case, server: Server, n: int, tmp: Path, extra: Sequence[str]) -> tuple[float, float]:
    """:func:`one_run`, once more if it failed (a shared server that didn't answer in time)."""
    try:
        return one_run(case, server, n, tmp, extra)
    except (RuntimeError, OSError) as exc:
        print(f"{case.broker} {case.label}: run failed, once more: {str(exc)[-300:]}", file=sys.stderr)
        return one_run(case, server, n, tmp, extra)


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The median of ``values`` and a distribution-free interval around it: the order
    statistics X(k+1) and X(n-k) (0-based k) with the largest k such that
    P(Bin(n, 1/2) <= k) <= (1 - ``confidence``) / 2, which covers the median with at least
    that confidence. With 8 values that is the whole range (99 %), with 12 the third
    smallest to the third largest (96 %), with 16 the fourth to the thirteenth (98 %)."""
    ordered = sorted(values)
    n = len(ordered)
    tail = (1 - confidence) / 2
    k, below = 0, 1 / 2**n  # below: P(Bin(n, 1/2) <= k)
    while k + 1 < n // 2 and below + math.comb(n, k + 1) / 2**n <= tail:
        k += 1
        below += math.comb(n, k) / 2**n
    return statistics.median(ordered), ordered[k], ordered[n - 1 - k]


def measure(broker: str, args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    server = SERVERS[broker](getattr(args, f"{broker}_url", ""), tmp)
    backend = {"BENCH_RESULT_BACKEND": args.redis_url} if broker == "rabbitmq" else {}
    without = Case(broker, "potatoq", "potatoq", sys.executable, env=dict(backend))
    with_limited = Case(
        broker, "potatoq", "limited", sys.executable, env={**backend, "BENCH_LIMITED": str(args.limited)}
    )
    extra = shlex.split(args.potatoq_args)
    started = dt.datetime.now(dt.UTC)
    loads = [os.getloadavg()[0]]
    rate_ratios: list[float] = []
    cpu_ratios: list[float] = []
    try:
        for pair in range(args.pairs):
            order = (without, with_limited) if pair % 2 == 0 else (with_limited, without)
            got = {case.label: _retried(case, server, args.n, tmp, extra) for case in order}
            loads.append(os.getloadavg()[0])
            (rate_a, cpu_a), (rate_b, cpu_b) = got["potatoq"], got["limited"]
            rate_ratios.append(rate_b / rate_a)
            cpu_ratios.append(cpu_b / cpu_a)
            print(
                f"{broker} pair {pair + 1}: {rate_a:,.0f} / {rate_b:,.0f} tasks/s, "
                f"{cpu_a:,.0f} / {cpu_b:,.0f} µs CPU per task",
                file=sys.stderr,
                flush=True,
            )
    finally:
        with contextlib.suppress(Exception):
            server.close()
    return {
        "broker": broker,
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "load": (min(loads), max(loads)),
        "pairs": len(rate_ratios),
        "rate": median_interval(rate_ratios),
        "cpu": median_interval(cpu_ratios),
    }


def report(rows: Sequence[dict[str, object]], args: argparse.Namespace) -> str:
    lines = [
        (
            f"{args.pairs} pairs per broker, -n {args.n}, {args.limited} tasks waiting on a 1/h rate "
            "in the same queue (B) or none (A); medians of the per-pair ratios B ÷ A, 95 % intervals:"
        ),
        "",
        "| broker | started (UTC), load | pairs | processed/s B ÷ A | worker CPU per task B ÷ A |",
        "| --- | --- | ---: | --- | --- |",
    ]
    for row in rows:
        rate, cpu, load = row["rate"], row["cpu"], row["load"]
        assert isinstance(rate, tuple) and isinstance(cpu, tuple) and isinstance(load, tuple)
        lines.append(
            f"| {row['broker']} | {row['started']}, {load[0]:.1f} to {load[1]:.1f} | {row['pairs']} "
            f"| {rate[0]:.3f} ({rate[1]:.3f} to {rate[2]:.3f}) "
            f"| {cpu[0]:.3f} ({cpu[1]:.3f} to {cpu[2]:.3f}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--pairs", type=int, default=12, help="pairs of runs per broker (default 12)")
    parser.add_argument("-n", type=int, default=1500, help="no-op tasks per run (default 1500)")
    parser.add_argument("--limited", type=int, default=500, help="tasks waiting on the limit (B)")
    parser.add_argument("--potatoq-args", default="", help='extra worker options, e.g. "-l warning"')
    for broker in ("redis", "postgres", "rabbitmq"):
        parser.add_argument(f"--{broker}-url", default=DEFAULT_URLS[broker])
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="potatoq-limits-") as tmpdir:
        for broker in args.brokers.split(","):
            if broker not in BROKERS:
                raise SystemExit(f"unknown broker {broker!r}: use {','.join(BROKERS)}")
            rows.append(measure(broker, args, Path(tmpdir)))
    print(report(rows, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
