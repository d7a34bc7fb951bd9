"""Worker CPU per no-op task on RabbitMQ, split by process and thread, one checkout against
another in alternating runs (the measure of issue 28's per-task work):

    python -m benchmarks.cpu_split --before ../main [--after .] [--pairs 8] [-n 2000]
                                   [--url amqp://...] [--env '{"BENCH_RESULT_BACKEND": ...}']
                                   [--server-pid PID]

Each run enqueues ``-n`` no-op tasks (``benchmarks.peers.potatoq_app``, under a queue prefix
of its own), starts a real ``potatoq worker -c 2`` from that checkout (its own directory
first on the path, this virtualenv), and reads ``/proc`` when the first task has finished
and when the last has: the CPU time (utime + stime) of every thread of the worker's
processes in between, divided by the tasks finished in between. That is steadier than
processed/s on a shared machine, where RabbitMQ's own latency moves the rate by 2x from
one run to the next. The split says where it goes: the children's main threads (their
tasks, and with a prefetch of 1 the connection too, see ``rabbitmq/baton.py``), the
children's other threads (the AMQP I/O thread), the supervisor. ``--server-pid``
adds a process outside the worker as "server", counted over the same interval and in the
total: the RabbitMQ node's ``beam.smp``, found by its port (``ss -ltnpH 'sport = :5673'``),
since what the worker's frames cost the broker runs on the same cores.

Another broker's URL works too (``--url sqlite:////tmp/cpu.sqlite3``): the same worker
and tasks, the broker emptied after each run (a SQLite file removed).

The two checkouts run back to back in alternating order (before-after, after-before, ...),
so a slow spell of the machine falls on both sides equally often. The report gives the
median of the per-pair ratios after ÷ before, with the distribution-free 95 % interval of
``benchmarks.limits_cost``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .limits_cost import median_interval
from .record import DONE_RECORD
from .run import DEFAULT_URLS

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")
MODULE = "benchmarks.peers.potatoq_app"
DROP = """import json, os
from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig
options = json.loads(os.environ["BENCH_TRANSPORT_OPTIONS"])
broker = create_broker(BrokerConfig(url=os.environ["BENCH_URL"], transport_options=options))
broker.drop_all()
broker.close()
"""


@dataclasses.dataclass
class Run:
    rate: float  # processed/s, first completion to last
    cpu_us: float  # worker CPU per task, all its processes
    split: dict[str, int]  # the same by process and thread
    load: float


def _threads(session: int, server: int | None = None) -> dict[tuple[str, str, str], int]:
    """CPU ticks so far of every thread of the processes in ``session``: (role, pid, tid);
    and the whole of process ``server``, if given: ("server", pid, "")."""
    out = {}
    if server is not None:
        with open(f"/proc/{server}/stat") as f:
            stat = f.read().rsplit(")", 1)[1].split()
        out[("server", str(server), "")] = int(stat[11]) + int(stat[12])
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) != session:
                continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read().rsplit(")", 1)[1].split()
                process = "supervisor" if int(pid) == session else "children"
                role = f"{process} {'main' if tid == pid else 'other'} threads"
                out[(role, pid, tid)] = int(stat[11]) + int(stat[12])
        except OSError:  # gone meanwhile
            continue
    return out


def _finished(done: Path) -> int:
    try:
        return done.stat().st_size // DONE_RECORD
    except OSError:
        return 0


def one_run(
    tree: Path, n: int, url: str, extra: dict[str, str], processes: int, server: int | None = None
) -> Run:
    """processed/s and CPU µs per task (total and split) of one worker from ``tree``."""
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="potatoq-cpu-") as tmp:
        done, log_path = Path(tmp) / "done", Path(tmp) / "worker.log"
        env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "BENCH_URL": url,
            "BENCH_DONE": str(done),
            # RabbitMQ: queues of this run's own (the drop at the end deletes them)
            "BENCH_TRANSPORT_OPTIONS": json.dumps(
                {"queue_prefix": f"benchcpu{time.time_ns()}_"} if url.startswith("amqp") else {}
            ),
            **extra,
        }
        subprocess.run(
            [python, "-m", "benchmarks.drive", "enqueue", MODULE, str(n), "--batch", "100"],
            cwd=tree, env=env, check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        with open(log_path, "wb") as log:
            worker = subprocess.Popen(
                [python, "-m", "potatoq.cli", "-A", MODULE, "worker", "-c", str(processes)],
                cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            marks = []
            for target in (1, n):
                while _finished(done) < target:
                    if worker.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(log_path.read_text()[-2000:])
                    time.sleep(0.005)
                marks.append((_finished(done), _threads(worker.pid, server)))
        finally:
            os.killpg(worker.pid, 15)
            worker.wait(60)
            if url.startswith("sqlite:///"):  # a file: the next run starts from an empty one
                for suffix in ("", "-wal", "-shm"):
                    Path(url[len("sqlite://") :] + suffix).unlink(missing_ok=True)
            else:
                drop = [python, "-c", DROP]
                subprocess.run(drop, check=False, cwd=tree, env=env, capture_output=True, timeout=120)
        (first, before), (last, after) = marks
        tasks = max(last - first, 1)
        split: dict[str, float] = {}
        for key, ticks in after.items():
            split[key[0]] = split.get(key[0], 0.0) + (ticks - before.get(key, 0)) / TICK / tasks * 1e6
        stamps = sorted(float(x) for x in done.read_bytes().split())
        return Run(
            rate=(len(stamps) - 1) / max(stamps[-1] - stamps[0], 1e-9),
            cpu_us=sum(split.values()),
            split={role: round(us) for role, us in sorted(split.items())},
            load=os.getloadavg()[0],
        )


def report(pairs: list[dict[str, Run]]) -> list[str]:
    cpu = median_interval([p["after"].cpu_us / p["before"].cpu_us for p in pairs])
    rate = median_interval([p["after"].rate / p["before"].rate for p in pairs])
    lower = sum(p["after"].cpu_us < p["before"].cpu_us for p in pairs)
    lines = [
        f"CPU per task, after ÷ before: {cpu[0]:.3f} ({cpu[1]:.3f} to {cpu[2]:.3f}), lower in {lower}",
        f"processed/s, after ÷ before: {rate[0]:.3f} ({rate[1]:.3f} to {rate[2]:.3f})",
    ]
    for side in ("before", "after"):
        runs = [p[side] for p in pairs]
        roles = sorted({role for run in runs for role in run.split})
        medians = ", ".join(f"{r} {statistics.median(x.split.get(r, 0) for x in runs):,.0f}" for r in roles)
        total = statistics.median(run.cpu_us for run in runs)
        lines.append(f"{side}: median µs per task {total:,.0f} ({medians})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, type=Path, help="the checkout to compare with")
    parser.add_argument("--after", default=ROOT, type=Path, help="default: this checkout")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("-n", type=int, default=2000, help="no-op tasks per run (default 2000)")
    parser.add_argument("-c", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--url", default=DEFAULT_URLS["rabbitmq"])
    parser.add_argument("--env", default="{}", help="JSON: more environment for both sides")
    parser.add_argument("--server-pid", type=int, help="count this process's CPU too (the broker's)")
    args = parser.parse_args(argv)
    extra = json.loads(args.env)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    loads = [os.getloadavg()[0]]
    pairs: list[dict[str, Run]] = []
    for index in range(args.pairs):
        order = ("before", "after") if index % 2 == 0 else ("after", "before")
        trees = {"before": args.before.resolve(), "after": args.after.resolve()}
        got = {s: one_run(trees[s], args.n, args.url, extra, args.c, args.server_pid) for s in order}
        loads.append(os.getloadavg()[0])
        pairs.append(got)
        line = {side: dataclasses.asdict(run) for side, run in got.items()}
        print(json.dumps({"pair": index + 1, **line}), file=sys.stderr, flush=True)
    print(f"{len(pairs)} pairs from {started}, load {min(loads):.1f}-{max(loads):.1f}, -n {args.n}, {extra}")
    print("\n".join(report(pairs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
