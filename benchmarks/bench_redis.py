"""potatoq on Redis beside Celery, Dramatiq, RQ and arq, in one run on one Redis server.

    python -m benchmarks.bench_redis [--url redis://127.0.0.1:6379] [-n 20000]
                                     [--arq-python /path/to/venv/bin/python]

For each system, on its own database of the same server (8 to 12, flushed before and
after), it measures:

* enqueue rate: N no-op tasks sent one API call each (potatoq also with batches of 100);
* processed rate with 2 worker processes: the rate between 10 % and 100 % of N done, so
  start-up time doesn't count;
* idle latency: from send to the task starting, with the workers idle (median, p90).

Every task does one Redis INCR (``noop``) or RPUSH (``stamp``) so that completion can be
observed the same way for every system. potatoq runs ``benchmarks.redis_peers.potatoq_loop``:
the claim / run / settle_and_claim loop of a worker child, without the supervisor.

arq pins redis<6 while Celery's kombu needs redis>=6.4, so arq can't share a virtualenv
with Celery: pass ``--arq-python`` pointing at a venv with arq installed (it is skipped
otherwise).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from benchmarks.redis_peers import COUNTER, LATENCIES

ROOT = Path(__file__).resolve().parent.parent
DATABASES = {"potatoq": 8, "celery": 9, "dramatiq": 10, "rq": 11, "arq": 12}
LATENCY_SAMPLES = 20


@dataclass
class Result:
    system: str
    enqueue_per_s: float
    processed_per_s: float
    latency_median_ms: float
    latency_p90_ms: float
    note: str = ""


def _bin(python: str, script: str) -> str:
    path = Path(python).parent / script
    return str(path) if path.exists() else shutil.which(script) or script


def worker_commands(system: str, python: str, url: str) -> list[list[str]]:
    """The worker command lines for 2 worker processes, each system with its defaults."""
    if system == "potatoq":
        return [[python, "-m", "benchmarks.redis_peers.potatoq_loop"]] * 2
    if system == "celery":
        app = "benchmarks.redis_peers.celery_app"
        return [[python, "-m", "celery", "-A", app, "worker", "-c", "2", "-l", "warning"]]
    if system == "dramatiq":
        return [[_bin(python, "dramatiq"), "benchmarks.redis_peers.dramatiq_app", "-p", "2"]]
    if system == "rq":
        return [[_bin(python, "rq"), "worker", "-q", "-u", url, "default"]] * 2
    if system == "arq":
        return [[_bin(python, "arq"), "benchmarks.redis_peers.arq_app.WorkerSettings"]] * 2
    raise ValueError(system)


def module_for(system: str) -> str:
    name = "potatoq_loop" if system == "potatoq" else f"{system}_app"
    return f"benchmarks.redis_peers.{name}"


# ----------------------------------------------------------------------------- producer side


def produce(system: str, n: int, batch: int) -> None:
    """Runs in a subprocess (the system's own venv): enqueue n no-ops, print the seconds taken."""
    module = importlib.import_module(module_for(system))
    started = time.perf_counter()
    if batch > 1:
        from potatoq.message import Message, new_id

        broker = module._producer()
        for i in range(0, n, batch):
            broker.enqueue(
                [Message(id=new_id(), task="noop", args=(j,)) for j in range(i, min(n, i + batch))]
            )
    else:
        for i in range(n):
            module.send("noop", i)
    print(time.perf_counter() - started)


def latency(system: str, samples: int) -> None:
    """Runs in a subprocess: send ``stamp`` tasks one at a time to idle workers."""
    module = importlib.import_module(module_for(system))
    client = redis.Redis.from_url(os.environ["BENCH_URL"])
    for i in range(samples):
        module.send("stamp", time.time())
        deadline = time.monotonic() + 30
        while client.llen(LATENCIES) <= i:
            if time.monotonic() > deadline:
                raise SystemExit(f"{system}: a stamp task didn't run within 30 s")
            time.sleep(0.0005)
        time.sleep(0.05)  # let the workers go idle again


# ----------------------------------------------------------------------------- orchestration


def _sub(python: str, env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [python, "-m", "benchmarks.bench_redis", *args],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def run_system(system: str, python: str, base_url: str, n: int) -> Result:
    url = f"{base_url.rstrip('/')}/{DATABASES[system]}"
    env = {**os.environ, "BENCH_URL": url, "PYTHONPATH": str(ROOT)}
    client = redis.Redis.from_url(url)
    client.flushdb()
    note = ""
    enqueue_s = float(_sub(python, env, "--produce", system, "-n", str(n)))
    if system == "potatoq":
        client.flushdb()
        batched = float(_sub(python, env, "--produce", system, "-n", str(n), "--batch", "100"))
        note = f"batched enqueue (100 per call): {n / batched:,.0f}/s"
    workers = [
        subprocess.Popen(
            cmd,
            env=env,
            cwd=ROOT,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for cmd in worker_commands(system, python, url)
    ]
    try:
        first = max(1, n // 10)
        deadline = time.monotonic() + 600
        t_first = None
        done_first = 0
        while True:
            done = int(client.get(COUNTER) or 0)
            now = time.perf_counter()
            if t_first is None and done >= first:
                t_first, done_first = now, done
            if done >= n:
                break
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise SystemExit(f"{system}: only {done}/{n} tasks ran")
            time.sleep(0.005)
        assert t_first is not None
        processed = (done - done_first) / max(now - t_first, 1e-9)
        _sub(python, env, "--latency", system, "-n", str(LATENCY_SAMPLES))
        samples = sorted(float(x) * 1000 for x in client.lrange(LATENCIES, 0, -1))
    finally:
        for w in workers:
            os.killpg(w.pid, signal.SIGTERM)
        for w in workers:
            try:
                w.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()
        client.flushdb()
    return Result(
        system,
        enqueue_per_s=n / enqueue_s,
        processed_per_s=processed,
        latency_median_ms=statistics.median(samples),
        latency_p90_ms=samples[int(len(samples) * 0.9) - 1],
        note=note,
    )


def report(results: list[Result]) -> str:
    lines = [
        "| system | enqueue/s | processed/s (2 processes) | idle latency median / p90 |",
        "|---|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.system} | {r.enqueue_per_s:,.0f} | {r.processed_per_s:,.0f} | "
            f"{r.latency_median_ms:.1f} ms / {r.latency_p90_ms:.1f} ms |"
        )
    ours = next((r for r in results if r.system == "potatoq"), None)
    peers = [r for r in results if r.system != "potatoq"]
    if ours and peers:
        best = max(peers, key=lambda r: r.processed_per_s)
        lines.append("")
        lines.append(
            f"potatoq processed/s vs the best peer ({best.system}): "
            f"{ours.processed_per_s / best.processed_per_s:.2f}x"
        )
        for r in peers:
            lines.append(f"  vs {r.system}: {ours.processed_per_s / r.processed_per_s:.2f}x")
        if ours.note:
            lines.append(f"potatoq {ours.note}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("POTATOQ_BENCH_REDIS_URL", "redis://127.0.0.1:6379"))
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--systems", default="potatoq,celery,dramatiq,rq,arq")
    parser.add_argument("--arq-python", default=None)
    parser.add_argument("--produce", metavar="SYSTEM")
    parser.add_argument("--latency", metavar="SYSTEM")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    if args.produce:
        produce(args.produce, args.n, args.batch)
        return
    if args.latency:
        latency(args.latency, args.n)
        return
    results = []
    for system in args.systems.split(","):
        python = sys.executable
        if system == "arq":
            if args.arq_python is None:
                print("skipping arq: pass --arq-python (arq needs redis<6, Celery needs redis>=6.4)")
                continue
            python = args.arq_python
        print(f"running {system} ...", flush=True)
        results.append(run_system(system, python, args.url, args.n))
    print(report(results))


if __name__ == "__main__":
    main()
