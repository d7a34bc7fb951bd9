"""potatoq beside its peers, on all four brokers, in one run: ``make bench``.

    python -m benchmarks.run [--brokers sqlite,redis,postgres,rabbitmq] [--systems ...]
                             [-n 5000] [--batch 100] [--latency-samples 200] ...

For each broker and each system (potatoq first, then the peers on the same server):

1. **enqueue/s**: one producer sends N no-op tasks, one API call each (``delay()``,
   ``send()``, ``enqueue()``, ``defer()``), into fresh storage, with no worker running;
2. **batched enqueue/s**: the same N through the system's group or batch API, in batches
   of ``--batch``, into fresh storage (n/a where a system has no such API);
3. **processed/s**: the system's real worker with 2 processes (``python -m potatoq.cli -A
   benchmarks.peers.potatoq_app worker -c 2`` for potatoq) is started on the N tasks of
   step 2; the rate from the first completion to the last, each task recording its own
   completion time (:mod:`benchmarks.record`), so start-up time doesn't count;
4. **idle latency**: then ``stamp`` tasks are sent one at a time into the idle worker,
   each recording how long after it was sent it started (p50 / p99). The producer first
   sends one ``noop`` and waits for it, so no sample includes opening its connection, and
   it waits for each sample on a FIFO rather than polling, so it takes no CPU from the
   worker while a sample is in flight.

Then, the **ETA lateness** stage (potatoq only): its worker, idle on fresh storage, gets
``--eta-samples`` tasks one at a time, each sent with a countdown (``--eta-countdown``, 1 s
by default: what ``retry_backoff=1`` gives) after a random pause of up to a second, and
each records how long after its due time it started (p50 / p99 / max).

Stages: ``--stages peers,eta`` (the default) runs both; ``make bench BENCH_ARGS="--stages
eta"`` runs only the ETA lateness, e.g. with ``--brokers postgres``.

On PostgreSQL potatoq runs a second time with 10,000 far-future ETAs waiting in the table
(sent before the N ready tasks), to show that they don't slow the claims of ready tasks.
After the PostgreSQL systems, ``benchmarks.pg_floor`` measures the idle latency of a bare
psycopg producer and LISTEN consumer on the same server; after the RabbitMQ systems,
``benchmarks.ceiling`` the rate of bare prefetch-1 and prefetch-4 consumers: what no system
can beat here. On RabbitMQ two configuration variants run beside the defaults (``VARIANTS``;
``--no-variants`` skips them): potatoq with ``worker_prefetch_multiplier=4`` and Celery with
``task_acks_late=True, worker_prefetch_multiplier=1`` (the guarantee potatoq gives by default).

``--history off`` adds, on every broker, potatoq with task history off (``task_history=False``)
right after its default run in each round, and reports history on ÷ off on processed/s
(round by round too): ``make bench BENCH_ARGS="--systems potatoq --history off --stages peers"``.
``--limits waiting`` adds potatoq with 500 tasks waiting on a rate limit (1/h) in the same
queue and reports its processed/s ÷ the run without them (issue 29: under 10 % less). On
RabbitMQ, whose limits live in a Redis result backend, both runs of that pair have one
(``--redis-url``) and ignore results. Three long rounds don't settle a 10 % question on a
shared machine: ``make bench-limits`` (:mod:`benchmarks.limits_cost`) measures it in many
short paired runs, with confidence intervals.

Every case runs ``--rounds`` times (3 by default), the rounds of one broker in turn (round
1 of every system, then round 2 of every system, ...): this VM's speed drifts by tens of
percent over minutes, and a single run per system let a slow spell land on one system
only. The report gives the median rate of the rounds, latency percentiles over all
rounds' samples, and potatoq's processed ratio to each peer round by round.

Every phase is bounded (``--max-seconds`` of processing, ``--latency-seconds`` of latency
samples): a slow peer reports the rate of what it finished, marked as partial. Everything
runs on loopback and everything created (files, databases, keys, queues) is removed.
Results go to stdout as Markdown (``--markdown FILE`` and ``--json FILE`` also write them).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import record
from .servers import ROOT, SERVERS, Server

BROKERS = ("sqlite", "redis", "postgres", "rabbitmq")
PEERS = {
    "sqlite": ("huey",),
    "redis": ("celery", "dramatiq", "rq", "arq"),
    "postgres": ("procrastinate",),
    "rabbitmq": ("celery", "dramatiq"),
}
DEFAULT_URLS = {
    "sqlite": "",
    "redis": os.environ.get("POTATOQ_BENCH_REDIS_URL", "redis://127.0.0.1:6379/9"),
    "postgres": os.environ.get("POTATOQ_BENCH_POSTGRES_URL", "postgresql://127.0.0.1:5432/postgres"),
    "rabbitmq": os.environ.get("POTATOQ_BENCH_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5673/"),
}
FAR_FUTURE_ETAS = 10_000
FAR_FUTURE_SECONDS = 365 * 24 * 3600.0
PROCESSES = 2
RABBITMQ_NOTE = (
    "potatoq confirms every publish (publisher confirms, mandatory) and acks late (after the task "
    "and its follow-ups are settled), with prefetch 1 per process by default and "
    '`worker_prefetch_multiplier=4` in the "prefetch 4" row; Celery with its defaults publishes '
    "without confirms and acks early (before the task runs, prefetching 4 messages per process), "
    "and with `task_acks_late=True, worker_prefetch_multiplier=1` acks late with prefetch 1 (still "
    "without publisher confirms)."
)
#: Configuration variants run beside a system's defaults on RabbitMQ: label, environment.
VARIANTS = {
    "potatoq": ("potatoq, prefetch 4", {"BENCH_PREFETCH_MULTIPLIER": "4"}),
    "celery": ("celery, acks late, prefetch 1", {"BENCH_CELERY_ACKS_LATE": "1"}),
}
#: ``--history off``: potatoq with task history off (``task_history=False``), beside its
#: default (history on), each round: what recording history costs on processed/s.
HISTORY_OFF = ("potatoq, history off", {"BENCH_TASK_HISTORY": "0"})
#: ``--limits waiting``: potatoq with tasks waiting on a limit in the same queue, beside a
#: run without them, each round: what the limit check costs tasks that have no limit.
LIMITED = 500
LIMITS_ON = (f"potatoq, {LIMITED} waiting on a limit", {"BENCH_LIMITED": str(LIMITED)})
#: RabbitMQ keeps limits in a Redis result backend: both runs of the pair have it there.
RABBITMQ_BACKED = ("potatoq, Redis result backend", {})
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STAGES = ("peers", "eta")


@dataclasses.dataclass
class Case:
    broker: str
    system: str
    label: str
    python: str
    far_future: int = 0
    #: extra environment for the system's processes: a configuration variant (see plan())
    env: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def module(self) -> str:
        return f"benchmarks.peers.{self.system}_app"


@dataclasses.dataclass
class Result:
    broker: str
    system: str
    label: str
    version: str = ""
    n: int = 0
    load: float = 0.0
    enqueue_per_s: float | None = None
    batch_per_s: float | None = None
    processed_per_s: float | None = None
    processed: int = 0
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_samples: int = 0
    worker_cpu_us: float | None = None  # worker CPU time per processed task
    error: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)
    rounds: int = 1  # how many runs of the case this result summarizes
    latency_ms: list[float] = dataclasses.field(default_factory=list, repr=False)  # the samples
    #: one round's samples in the order they were taken (in the JSON): a tail that gathers at
    #: the start of the phase points at what the phase before it left behind
    latency_in_order_ms: list[float] = dataclasses.field(default_factory=list, repr=False)


@dataclasses.dataclass
class EtaResult:
    """The ETA-lateness stage on one broker: how late each task started after it was due."""

    broker: str
    load: float = 0.0
    lateness_ms: list[float] = dataclasses.field(default_factory=list)
    error: str = ""
    rounds: int = 1

    def percentile(self, q: float) -> float | None:
        return _percentile(sorted(self.lateness_ms), q) if self.lateness_ms else None


# ----------------------------------------------------------------------------- workers


def worker_commands(case: Case, extra: Sequence[str] = ()) -> list[list[str]]:
    """The command lines for 2 worker processes of ``case.system``, with its defaults
    (``extra`` is added to potatoq's: ``--potatoq-args``)."""
    bindir = Path(case.python).parent
    if case.system == "potatoq":
        return [[case.python, "-m", "potatoq.cli", "-A", case.module, "worker", "-c", str(PROCESSES), *extra]]
    if case.system == "celery":
        return [[case.python, "-m", "celery", "-A", case.module, "worker", "-c", str(PROCESSES)]]
    if case.system == "dramatiq":
        return [[str(bindir / "dramatiq"), case.module, "-p", str(PROCESSES)]]
    if case.system == "rq":
        url = os.environ["BENCH_URL"]
        return [[str(bindir / "rq"), "worker", "-u", url, "default"]] * PROCESSES
    if case.system == "arq":
        return [[str(bindir / "arq"), f"{case.module}.WorkerSettings"]] * PROCESSES
    if case.system == "huey":
        return [[str(bindir / "huey_consumer"), f"{case.module}.huey", "-w", str(PROCESSES), "-k", "process"]]
    if case.system == "procrastinate":
        return [[str(bindir / "procrastinate"), f"--app={case.module}.app", "worker"]] * PROCESSES
    raise ValueError(case.system)


class Workers:
    """The worker processes of one case, each in its own session so they stop as a group."""

    def __init__(self, case: Case, env: dict[str, str], log: Path, extra: Sequence[str] = ()) -> None:
        self.log = log
        self.procs: list[subprocess.Popen[bytes]] = []
        os.environ["BENCH_URL"] = env["BENCH_URL"]  # rq takes it on its command line
        with open(log, "ab") as out:
            for cmd in worker_commands(case, extra):
                self.procs.append(
                    subprocess.Popen(
                        cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )

    def cpu_seconds(self) -> float:
        """CPU time used so far by every process of the workers' sessions, including exited
        children their parents have reaped (a recycled child, an RQ work horse)."""
        sessions = {p.pid for p in self.procs}
        ticks = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            # after the command: state ppid pgrp session ... utime(12) stime cutime cstime
            if int(fields[3]) in sessions:
                ticks += sum(int(x) for x in fields[11:15])
        return ticks / CLOCK_TICKS

    def died(self) -> bool:
        return any(p.poll() is not None for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            with contextlib.suppress(ProcessLookupError):  # stragglers of the group (forked children)
                os.killpg(p.pid, signal.SIGKILL)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


# ----------------------------------------------------------------------------- one case


def _drive(case: Case, env: dict[str, str], *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [case.python, "-m", "benchmarks.drive", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"drive {' '.join(args)} failed:\n{done.stderr.strip()[-2000:]}")
    return done.stdout.strip()


def _percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def run_case(case: Case, server: Server, args: argparse.Namespace, tmp: Path) -> Result:
    result = Result(case.broker, case.system, case.label, n=args.n, load=os.getloadavg()[0])
    base = {**os.environ, "PYTHONPATH": str(ROOT), **case.env}
    base.pop("BENCH_URL", None)
    with contextlib.suppress(Exception):
        result.version = _drive(case, base, "version", case.system, timeout=60)
    slug = f"{case.broker}-{case.label}".replace(" ", "_").replace(",", "")
    created: list[dict[str, str]] = []
    workers: Workers | None = None
    try:
        # 1. one call per task, no worker running
        env = {**base, **server.fresh(case.system, "single")}
        created.append(env)
        seconds = float(_drive(case, env, "enqueue", case.module, str(args.n)))
        result.enqueue_per_s = args.n / seconds
        server.drop(case.system, env)
        created.remove(env)

        # 2. batched enqueue into fresh storage; these are the tasks the workers will run
        storage = {**base, **server.fresh(case.system, "batch")}
        created.append(storage)
        env = storage
        if case.far_future:
            _drive(
                case,
                env,
                "enqueue",
                case.module,
                str(case.far_future),
                "--batch",
                str(args.batch),
                "--countdown",
                str(FAR_FUTURE_SECONDS),
            )
            result.notes.append(f"{case.far_future:,} tasks with an ETA a year ahead waited in the table")
        if _has_batch(case):
            seconds = float(
                _drive(case, env, "enqueue", case.module, str(args.n), "--batch", str(args.batch))
            )
            result.batch_per_s = args.n / seconds
        else:
            _drive(case, env, "enqueue", case.module, str(args.n))

        # 3. the real worker on those N tasks
        done_path = tmp / f"{slug}.done"
        started_path = tmp / f"{slug}.started"
        for path in (done_path, started_path):  # an earlier round's records
            path.unlink(missing_ok=True)
        env = {**env, **_record_env(done_path, started_path)}
        workers = Workers(case, env, tmp / f"{slug}.log", shlex.split(args.potatoq_args))
        t0 = time.monotonic()
        first_at: float | None = None
        first_cpu, first_count = 0.0, 0
        while True:
            count = record.count_done(str(done_path))
            now = time.monotonic()
            if count and first_at is None:
                first_at, first_cpu, first_count = now, workers.cpu_seconds(), count
            if count >= args.n:
                break
            if workers.died():
                raise RuntimeError(f"a worker exited after {count}/{args.n} tasks:\n{workers.tail()}")
            if first_at is None and now - t0 > args.start_seconds:
                raise RuntimeError(f"no task finished within {args.start_seconds:g} s:\n{workers.tail()}")
            if first_at is not None and now - first_at > args.max_seconds:
                result.notes.append(f"partial: {count:,} of {args.n:,} tasks done in {args.max_seconds:g} s")
                break
            time.sleep(0.01)
        result.worker_cpu_us = (workers.cpu_seconds() - first_cpu) / max(count - first_count, 1) * 1e6
        stamps = sorted(float(line) for line in done_path.read_bytes().split())
        result.processed = len(stamps)
        result.processed_per_s = (len(stamps) - 1) / max(stamps[-1] - stamps[0], 1e-9)
        if result.processed < args.n:
            # A backlog would turn the latency samples into queueing times: start again on
            # empty storage, with one task run first so that start-up isn't sampled.
            workers.stop()
            server.drop(case.system, storage)
            created.remove(storage)
            storage = {**base, **server.fresh(case.system, "latency")}
            created.append(storage)
            env = {**storage, **_record_env(done_path, started_path)}
            workers = Workers(case, env, tmp / f"{slug}.log", shlex.split(args.potatoq_args))
            _drive(case, env, "enqueue", case.module, "1")
            _wait_for(
                lambda: record.count_done(str(done_path)) > result.processed, workers, args.start_seconds
            )

        # 4. idle latency, one task at a time
        time.sleep(0.3)  # idle: the workers have gone back to waiting
        try:
            _drive(
                case,
                env,
                "latency",
                case.module,
                str(args.latency_samples),
                str(args.latency_seconds),
                f"--gap-ms={args.latency_gap_ms}",
                timeout=args.latency_seconds + 60,
            )
        except RuntimeError as exc:  # keep the samples taken so far, and say what happened
            result.notes.append(f"latency sampling stopped: {str(exc).splitlines()[-1]}")
        result.latency_in_order_ms = [float(x) * 1000 for x in started_path.read_bytes().split()]
        _set_latency(result, result.latency_in_order_ms)
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        if workers is not None:
            result.error += f"\nworker log:\n{workers.tail()}"
    finally:
        if workers is not None:
            workers.stop()
        for env in created:
            try:
                server.drop(case.system, env)
            except Exception as exc:
                result.notes.append(f"cleanup failed: {exc!r}")
    return result


def run_eta(case: Case, server: Server, args: argparse.Namespace, tmp: Path) -> EtaResult:
    """The ETA-lateness stage of ``case`` (potatoq): tasks with a countdown sent one at a
    time into its idle worker, each recording how late after its due time it started."""
    result = EtaResult(case.broker, load=os.getloadavg()[0])
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    base.pop("BENCH_URL", None)
    slug = f"{case.broker}-eta"
    done_path, started_path = tmp / f"{slug}.done", tmp / f"{slug}.started"
    for path in (done_path, started_path):  # an earlier round's records
        path.unlink(missing_ok=True)
    storage = {**base, **server.fresh(case.system, "eta")}
    workers: Workers | None = None
    try:
        env = {**storage, **_record_env(done_path, started_path)}
        workers = Workers(case, env, tmp / f"{slug}.log", shlex.split(args.potatoq_args))
        _drive(
            case,
            env,
            "eta",
            case.module,
            str(args.eta_samples),
            str(args.eta_seconds),
            f"--countdown={args.eta_countdown}",
            timeout=args.eta_seconds + args.start_seconds + 60,
        )
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        if workers is not None:
            result.error += f"\nworker log:\n{workers.tail()}"
    finally:
        if workers is not None:
            workers.stop()
        with contextlib.suppress(Exception):
            server.drop(case.system, storage)
    with contextlib.suppress(FileNotFoundError):  # the samples taken, even after a failure
        result.lateness_ms = [float(x) * 1000 for x in started_path.read_bytes().split()]
    return result


def combine_eta(runs: Sequence[EtaResult]) -> EtaResult:
    """One row from the rounds of a broker's ETA stage: all samples pooled."""
    ok = [r for r in runs if not r.error]
    row = EtaResult(runs[0].broker, load=statistics.mean(r.load for r in runs), rounds=len(ok))
    row.lateness_ms = [x for r in runs for x in r.lateness_ms]
    row.error = "" if ok else runs[0].error
    return row


def _record_env(done_path: Path, started_path: Path) -> dict[str, str]:
    """Where the tasks of one case record themselves (see ``benchmarks.record``)."""
    return {
        record.DONE_ENV: str(done_path),
        record.STARTED_ENV: str(started_path),
        record.STARTED_FIFO_ENV: f"{started_path}.fifo",
    }


def _set_latency(result: Result, samples_ms: list[float]) -> None:
    result.latency_ms = sorted(samples_ms)
    result.latency_samples = len(samples_ms)
    if samples_ms:
        result.latency_p50_ms = statistics.median(result.latency_ms)
        result.latency_p99_ms = _percentile(result.latency_ms, 99)


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def combine(runs: Sequence[Result]) -> Result:
    """One row for the report from the rounds of one case: the median of each rate and of
    the CPU per task, and the latency percentiles of all rounds' samples pooled. A round
    that failed is left out (and named in the notes); the row fails only if all did."""
    ok = [r for r in runs if not r.error]
    first = runs[0]
    row = Result(first.broker, first.system, first.label, first.version, first.n, rounds=len(ok))
    row.load = statistics.mean(r.load for r in runs)
    row.notes = [note for r in runs for note in r.notes]
    if not ok:
        row.error = first.error
        return row
    row.version = next((r.version for r in ok if r.version), "")
    row.enqueue_per_s = _median([r.enqueue_per_s for r in ok])
    row.batch_per_s = _median([r.batch_per_s for r in ok])
    row.processed_per_s = _median([r.processed_per_s for r in ok])
    row.processed = min(r.processed for r in ok)
    row.worker_cpu_us = _median([r.worker_cpu_us for r in ok])
    _set_latency(row, [x for r in ok for x in r.latency_ms])
    for index, r in enumerate(runs, 1):
        if r.error:
            row.notes.append(f"round {index} failed: {r.error.splitlines()[0][:200]}")
    return row


def _bare(label: str, args: Sequence[str], timeout: float) -> Any:
    """Run ``python -m benchmarks.<args>`` (a bare-client measurement) and return the JSON it
    prints, or None if it failed (said on stderr; the report then leaves it out)."""
    print(f"{label} ...", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        return json.loads(proc.stdout)
    except (subprocess.SubprocessError, ValueError) as exc:
        print(f"  failed: {exc!r}", file=sys.stderr, flush=True)
        return None


def postgres_floor(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """Bare psycopg producer and LISTEN consumer, paced as the latency samples are (see
    benchmarks.pg_floor): their idle latencies and the producer's commit times, in seconds."""
    raw = _bare(
        "postgres: bare psycopg latency floor",
        [
            "benchmarks.pg_floor",
            url,
            f"--samples={args.latency_samples}",
            f"--seconds={args.latency_seconds}",
            f"--gap-ms={args.latency_gap_ms}",
        ],
        timeout=args.latency_seconds + 120,
    )
    return {} if raw is None else {name: [float(x) for x in raw[name]] for name in ("latency", "commit")}


def floor_summary(runs: Sequence[dict[str, list[float]]]) -> dict[str, float]:
    """p50 / p99 of the floor's latency and commit times, all rounds' samples pooled."""
    floor: dict[str, float] = {"samples": float(sum(len(run.get("latency", [])) for run in runs))}
    for name in ("latency", "commit"):
        values = sorted(x * 1000 for run in runs for x in run.get(name, []))
        if values:
            floor[f"{name}_p50_ms"] = statistics.median(values)
            floor[f"{name}_p99_ms"] = _percentile(values, 99)
    return floor


def rabbitmq_ceiling(url: str) -> dict[str, float]:
    """Bare pika consumers' rate on a quorum queue, prefetch 1 and 4 (see benchmarks.ceiling)."""
    raw = _bare("rabbitmq: bare pika ceiling", ["benchmarks.ceiling", url], timeout=300)
    return {} if raw is None else {k: float(v) for k, v in raw.items()}


def _has_batch(case: Case) -> bool:
    return case.system not in ("arq", "huey")


def _wait_for(condition: Callable[[], bool], workers: Workers, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if workers.died() or time.monotonic() > deadline:
            raise RuntimeError(f"the workers didn't run a task within {seconds:g} s:\n{workers.tail()}")
        time.sleep(0.01)


# ----------------------------------------------------------------------------- report


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{kib / 1024 / 1024:.0f} GiB"
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": f"{cpu}, {os.cpu_count()} cores",
        "memory": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load": "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
    }


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} µs"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or theirs == 0:
        return "n/a"
    ratio = ours / theirs
    return f"{ratio:.2f}×" if ratio >= 0.1 else f"{ratio:.3f}×"  # noqa: RUF001 - a multiplication sign


def _round_ratios(ours: Sequence[Result], theirs: Sequence[Result]) -> str:
    """potatoq's processed/s over the peer's, each round with its own (n/a for a failed one)."""
    ratios = [
        _ratio(a.processed_per_s, b.processed_per_s) if not (a.error or b.error) else "n/a"
        for a, b in zip(ours, theirs, strict=False)
    ]
    return " · ".join(ratios) or "n/a"


def report(
    results: list[Result],
    servers: dict[str, str],
    info: dict[str, str],
    args: argparse.Namespace,
    ceiling: dict[str, float] | None = None,
    floor: dict[str, float] | None = None,
    runs: dict[tuple[str, str], list[Result]] | None = None,
) -> str:
    runs = runs or {}
    out = [
        (
            f"Run {info['date']} on {info['cpu']}, {info['memory']}, {info['os']}, "
            f"Python {info['python']}; load average at the start {info['start_load']}, "
            f"at the end {info['load']}."
        ),
    ]
    if results:  # the peers stage ran
        out.append(
            f"{args.n:,} no-op tasks per system, batches of {args.batch}, {PROCESSES} worker processes, "
            f"up to {args.latency_samples} idle-latency samples ({args.latency_seconds:g} s at most) "
            f"sent {args.latency_gap_ms.replace(',', ' to ')} ms apart."
        )
    if args.rounds > 1:
        out.append(
            f"Every system ran {args.rounds} times, in turn (round 1 of each, then round 2 of each, ...): "
            "rates and CPU per task are the median of the rounds, latency percentiles are over all "
            "rounds' samples, and the processed ratio is also given round by round."
        )
    for broker in BROKERS:
        rows = [r for r in results if r.broker == broker]
        if not rows:
            continue
        out += ["", f"### {broker} ({servers.get(broker, '?')})", ""]
        out.append(
            "| system | enqueue/s (one call each) | batched enqueue/s | processed/s (2 processes) "
            "| worker CPU per task | idle latency p50 / p99 | load (1 min) |"
        )
        out.append("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            name = f"{r.label} {r.version}".strip()
            if r.error:
                out.append(f"| {name} | failed: {r.error.splitlines()[0][:150]} | | | | | {r.load:.2f} |")
                continue
            latency = f"{_ms(r.latency_p50_ms)} / {_ms(r.latency_p99_ms)} ms ({r.latency_samples})"
            processed = _rate(r.processed_per_s) + ("*" if r.processed < r.n else "")
            out.append(
                f"| {name} | {_rate(r.enqueue_per_s)} | {_rate(r.batch_per_s)} | {processed} "
                f"| {_us(r.worker_cpu_us)} | {latency} | {r.load:.2f} |"
            )
        ours = next((r for r in rows if r.label == "potatoq" and not r.error), None)
        peers = [r for r in rows if r.system != "potatoq" and not r.error]
        variants = [r for r in rows if r.label in {v[0] for v in VARIANTS.values()} and r.system == "potatoq"]
        pairs = [(o, r) for o in [ours, *variants] if o is not None and not o.error for r in peers]
        if ours and peers:
            out += [
                "",
                "potatoq ÷ peer (above 1 is potatoq ahead for rates; for latency below 1 is potatoq ahead):",
                "",
                (
                    "| potatoq ÷ peer | enqueue | batched enqueue | processed | processed, round by round "
                    "| latency p50 | latency p99 |"
                ),
                "|---|---:|---:|---:|---:|---:|---:|",
            ]
            for mine, r in pairs:
                out.append(
                    f"| {mine.label} ÷ {r.label} | {_ratio(mine.enqueue_per_s, r.enqueue_per_s)} "
                    f"| {_ratio(mine.batch_per_s, r.batch_per_s)} "
                    f"| {_ratio(mine.processed_per_s, r.processed_per_s)} "
                    f"| {_round_ratios(runs.get((broker, mine.label), []), runs.get((broker, r.label), []))} "
                    f"| {_ratio(mine.latency_p50_ms, r.latency_p50_ms)} "
                    f"| {_ratio(mine.latency_p99_ms, r.latency_p99_ms)} |"
                )
        off = next((r for r in rows if r.label == HISTORY_OFF[0] and not r.error), None)
        if ours and off:
            by_round = _round_ratios(runs.get((broker, "potatoq"), []), runs.get((broker, off.label), []))
            out += [
                "",
                (
                    f"Task history: potatoq with history on processed "
                    f"{_ratio(ours.processed_per_s, off.processed_per_s)} of its rate with history off "
                    f"(round by round: {by_round})."
                ),
            ]
        waiting = next((r for r in rows if r.label == LIMITS_ON[0] and not r.error), None)
        base_label = RABBITMQ_BACKED[0] if broker == "rabbitmq" else "potatoq"
        base = next((r for r in rows if r.label == base_label and not r.error), None)
        if waiting and base:
            pair = runs.get((broker, waiting.label), []), runs.get((broker, base_label), [])
            by_round = _round_ratios(*pair)
            out += [
                "",
                (
                    f"Limits: with {LIMITED} tasks waiting on a rate limit in the same queue, potatoq "
                    "processed its unlimited tasks at "
                    f"{_ratio(waiting.processed_per_s, base.processed_per_s)} of the rate of "
                    f"{base_label!r} (round by round: {by_round})."
                ),
            ]
        eta = next((r for r in rows if "far-future" in r.label and not r.error), None)
        if ours and eta:
            out += [
                "",
                (
                    f"With {FAR_FUTURE_ETAS:,} far-future ETAs waiting, potatoq processed "
                    f"{_rate(eta.processed_per_s)}/s: {_ratio(eta.processed_per_s, ours.processed_per_s)} "
                    "its rate without them."
                ),
            ]
        if broker == "postgres" and floor and "latency_p99_ms" in floor:
            line = (
                f"Floor in the same run (`benchmarks.pg_floor`): a bare psycopg producer (one INSERT "
                f"and pg_notify statement, durable commit) and a bare LISTEN consumer that claims with "
                f"one UPDATE ... SKIP LOCKED, no queue library: idle latency p50 / p99 "
                f"{_ms(floor['latency_p50_ms'])} / {_ms(floor['latency_p99_ms'])} ms "
                f"({floor['samples']:.0f}), of which the producer's commit "
                f"{_ms(floor['commit_p50_ms'])} / {_ms(floor['commit_p99_ms'])} ms"
            )
            if ours and ours.latency_p99_ms:
                line += (
                    f"; potatoq's p50 / p99 are {_ratio(ours.latency_p50_ms, floor['latency_p50_ms'])} / "
                    f"{_ratio(ours.latency_p99_ms, floor['latency_p99_ms'])} the floor's"
                )
            out += ["", line + "."]
        if broker == "rabbitmq":
            out += ["", RABBITMQ_NOTE]
            if ceiling:
                line = (
                    f"Ceiling in the same run (`benchmarks.ceiling`): bare pika consumers that do no "
                    f"work and ack each delivery on arrival, {PROCESSES} processes on one quorum queue, "
                    f"reach {_rate(ceiling.get('1'))}/s with prefetch 1 and {_rate(ceiling.get('4'))}/s "
                    "with prefetch 4"
                )
                for mine, key in ((ours, "1"), *((v, "4") for v in variants if not v.error)):
                    if mine is not None:
                        line += (
                            f"; {mine.label}'s processed/s is "
                            f"{_ratio(mine.processed_per_s, ceiling.get(key))} the prefetch-{key} ceiling"
                        )
                out.append(line + ".")
        notes = [f"{r.label}: {note}" for r in rows for note in r.notes]
        errors = [f"{r.label}: {r.error}" for r in rows if r.error]
        if any(r.processed < r.n and not r.error for r in rows):
            notes.append("* partial: the worker didn't finish all tasks within the time bound")
        if notes or errors:
            out += ["", *[f"- {line}" for line in notes + errors]]
    return "\n".join(out)


def eta_report(rows: Sequence[EtaResult], servers: dict[str, str], args: argparse.Namespace) -> str:
    low, high = args.eta_countdown.split(",")
    countdown = f"{low} s" if float(low) == float(high) else f"{low} to {high} s"
    out = [
        "### ETA lateness (potatoq)",
        "",
        (
            f"Up to {args.eta_samples} tasks per round sent one at a time into an idle worker "
            f"({PROCESSES} processes) with a countdown of {countdown}, after a random pause of up to "
            "1 s; lateness is how long after its due time each one started."
        ),
        "",
        "| broker | lateness p50 / p99 / max | samples | load (1 min) |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        name = f"{r.broker} ({servers.get(r.broker, '?')})"
        if r.error and not r.lateness_ms:
            out.append(f"| {name} | failed: {r.error.splitlines()[0][:150]} | | {r.load:.2f} |")
            continue
        figures = " / ".join(_ms(r.percentile(q)) for q in (50, 99, 100))
        out.append(f"| {name} | {figures} ms | {len(r.lateness_ms)} | {r.load:.2f} |")
    failed = [f"- {r.broker}: {r.error}" for r in rows if r.error]
    return "\n".join(out + (["", *failed] if failed else []))


# ----------------------------------------------------------------------------- main


def plan(args: argparse.Namespace) -> tuple[list[Case], list[str]]:
    cases: list[Case] = []
    skipped: list[str] = []
    wanted = set(args.systems.split(",")) if args.systems else None
    for broker in args.brokers.split(","):
        if broker not in BROKERS:
            raise SystemExit(f"unknown broker {broker!r}: use {','.join(BROKERS)}")
        for system in ("potatoq", *PEERS[broker]):
            if wanted is not None and system not in wanted:
                continue
            python = sys.executable
            if system == "arq":
                if not args.arq_python or not Path(args.arq_python).exists():
                    skipped.append("arq: no --arq-python (arq needs redis<6, Celery's kombu redis>=6.4)")
                    continue
                python = args.arq_python
            cases.append(Case(broker, system, system, python))
            if system == "potatoq" and args.history == "off":
                cases.append(Case(broker, system, HISTORY_OFF[0], python, env=HISTORY_OFF[1]))
            if system == "potatoq" and args.limits == "waiting":
                backend = {"BENCH_RESULT_BACKEND": args.redis_url} if broker == "rabbitmq" else {}
                if backend:
                    cases.append(Case(broker, system, RABBITMQ_BACKED[0], python, env=backend))
                cases.append(Case(broker, system, LIMITS_ON[0], python, env={**LIMITS_ON[1], **backend}))
            if broker == "rabbitmq" and not args.no_variants:
                # The same guarantee side by side: potatoq with a prefetch multiplier (acks
                # still late, publishes confirmed), and Celery acking late with prefetch 1.
                variant = VARIANTS.get(system)
                if variant is not None:
                    cases.append(Case(broker, system, variant[0], python, env=variant[1]))
            if broker == "postgres" and system == "potatoq" and not args.no_far_future:
                label = f"potatoq, {FAR_FUTURE_ETAS:,} far-future ETAs"
                cases.append(Case(broker, system, label, python, far_future=FAR_FUTURE_ETAS))
    return cases, skipped


def _run_broker(
    broker: str,
    cases: Sequence[Case],
    server: Server,
    args: argparse.Namespace,
    tmp: Path,
    runs: dict[tuple[str, str], list[Result]],
    floors: list[dict[str, list[float]]],
    eta_runs: dict[str, list[EtaResult]],
) -> None:
    """Every case of one broker, ``--rounds`` times over in turn (round 1 of each system,
    then round 2 of each, ...), so that a slow spell of the machine falls on every system
    rather than on whichever one ran during it; PostgreSQL's floor is measured each round,
    and the ETA stage runs after the cases of each round."""
    stages = args.stages.split(",")
    for round_no in range(1, args.rounds + 1):
        for case in cases if "peers" in stages else ():
            tag = f" (round {round_no} of {args.rounds})" if args.rounds > 1 else ""
            print(f"{broker}: {case.label}{tag} ...", file=sys.stderr, flush=True)
            started = time.monotonic()
            result = run_case(case, server, args, tmp)
            print(
                f"  {time.monotonic() - started:.0f} s  "
                + (result.error.splitlines()[0] if result.error else "ok"),
                file=sys.stderr,
                flush=True,
            )
            runs.setdefault((broker, case.label), []).append(result)
        potatoq_ran = any(not r.error for r in runs.get((broker, "potatoq"), []))
        if broker == "postgres" and potatoq_ran:
            floor = postgres_floor(args.postgres_url, args)
            if floor:
                floors.append(floor)
        if "eta" in stages:
            tag = f" (round {round_no} of {args.rounds})" if args.rounds > 1 else ""
            print(f"{broker}: potatoq ETA lateness{tag} ...", file=sys.stderr, flush=True)
            eta = run_eta(Case(broker, "potatoq", "potatoq", sys.executable), server, args, tmp)
            print("  " + (eta.error.splitlines()[0] if eta.error else "ok"), file=sys.stderr, flush=True)
            eta_runs.setdefault(broker, []).append(eta)


def _plain(result: Result) -> dict[str, Any]:
    """A result for the JSON file: a round's samples in the order taken, not sorted again."""
    data = dataclasses.asdict(result)
    data.pop("latency_ms")
    if not data["latency_in_order_ms"]:  # a summary of rounds
        data.pop("latency_in_order_ms")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--systems", default="", help="comma-separated subset, e.g. potatoq,celery")
    parser.add_argument("-n", type=int, default=5000, help="tasks per system (default 5000)")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs of every case, in turn; the report shows medians"
    )
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument(
        "--latency-gap-ms", default="5,40", help="pause between latency samples, uniform in MIN,MAX ms"
    )
    parser.add_argument("--max-seconds", type=float, default=25.0, help="processing bound per system")
    parser.add_argument("--start-seconds", type=float, default=60.0, help="bound on worker start-up")
    parser.add_argument("--potatoq-args", default="", help='extra potatoq worker options, e.g. "-l warning"')
    parser.add_argument("--no-far-future", action="store_true", help="skip the PostgreSQL ETA run")
    parser.add_argument(
        "--no-variants", action="store_true", help="skip the RabbitMQ configuration variants (VARIANTS)"
    )
    parser.add_argument(
        "--limits",
        choices=("none", "waiting"),
        default="none",
        help=f"waiting: also run potatoq with {LIMITED} tasks waiting on a limit in its queue; the ratio",
    )
    parser.add_argument(
        "--history",
        choices=("on", "off"),
        default="on",
        help="off: also run potatoq with task history off each round, and give the on/off ratio",
    )
    parser.add_argument(
        "--stages", default=",".join(STAGES), help="peers (potatoq beside its peers), eta (ETA lateness)"
    )
    parser.add_argument("--eta-samples", type=int, default=20, help="ETA-lateness tasks per round")
    parser.add_argument("--eta-seconds", type=float, default=60.0, help="bound on ETA sampling per round")
    parser.add_argument(
        "--eta-countdown", default="1,1", help="countdown of each ETA task: uniform in MIN,MAX s"
    )
    for broker in ("redis", "postgres", "rabbitmq"):
        parser.add_argument(f"--{broker}-url", default=DEFAULT_URLS[broker])
    default_arq = ROOT / ".venv-bench-arq" / "bin" / "python"
    parser.add_argument("--arq-python", default=str(default_arq) if default_arq.exists() else "")
    parser.add_argument("--markdown", help="also write the report here")
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args(argv)
    unknown = set(args.stages.split(",")) - set(STAGES)
    if unknown:
        parser.error(f"unknown stage(s) {', '.join(sorted(unknown))} in --stages: use {','.join(STAGES)}")

    cases, skipped = plan(args)
    info = machine()
    info["start_load"] = info["load"]
    runs: dict[tuple[str, str], list[Result]] = {}
    versions: dict[str, str] = {}
    ceiling: dict[str, float] = {}
    floors: list[dict[str, list[float]]] = []
    eta_runs: dict[str, list[EtaResult]] = {}
    with tempfile.TemporaryDirectory(prefix="potatoq-bench-") as tmpdir:
        tmp = Path(tmpdir)
        for broker in dict.fromkeys(args.brokers.split(",")):
            try:
                server = SERVERS[broker](getattr(args, f"{broker}_url", ""), tmp)
                versions[broker] = server.version()
            except Exception as exc:
                skipped.append(f"{broker}: server unreachable ({exc!r})")
                continue
            try:
                _run_broker(
                    broker,
                    [c for c in cases if c.broker == broker],
                    server,
                    args,
                    tmp,
                    runs,
                    floors,
                    eta_runs,
                )
            finally:
                with contextlib.suppress(Exception):
                    server.close()
            if broker == "rabbitmq" and any(not r.error for r in runs.get((broker, "potatoq"), [])):
                ceiling = rabbitmq_ceiling(args.rabbitmq_url)
    results = [combine(rounds) for rounds in runs.values()]
    floor = floor_summary(floors) if floors else {}
    info.update(machine() | {"date": info["date"], "start_load": info["start_load"]})
    text = report(results, versions, info, args, ceiling, floor, runs)
    eta_rows = [combine_eta(eta_runs[b]) for b in BROKERS if b in eta_runs]
    if eta_rows:
        text += "\n\n" + eta_report(eta_rows, versions, args)
    if skipped:
        text += "\n\nSkipped: " + "; ".join(skipped)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "machine": info,
                    "servers": versions,
                    "results": [_plain(r) for r in results],
                    "rounds": [_plain(r) for rounds in runs.values() for r in rounds],
                    "rabbitmq_ceiling": ceiling,
                    "postgres_floor": floor,
                    "postgres_floor_rounds": [floor_summary([run]) for run in floors],
                    "eta_lateness_rounds": [
                        dataclasses.asdict(r) for rounds in eta_runs.values() for r in rounds
                    ],
                },
                indent=2,
            )
        )
    return 1 if any(r.error for r in results) or any(r.error for r in eta_rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
