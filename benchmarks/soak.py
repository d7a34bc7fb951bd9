"""``make bench-soak``: does the cost stay flat over a long run? A soak per broker (issue 27).

For each broker (SQLite, PostgreSQL, Redis, RabbitMQ 4 with a Redis result backend), with
a real worker (``potatoq worker -c 2``, a subprocess, on an app module written for the run)
and a producer thread in this process:

1. **Maximum rate** (``--max-seconds``, 60): the producer keeps the queue saturated (a
   group of 500 tasks whenever fewer than 2,000 wait) and the processed/s over that time
   is the worker's maximum at this machine's current load (after 10 s of warm-up). Its
   storage is then dropped: the soak starts empty.
2. **Soak** (``--minutes``, 30) at ``--fraction`` (0.5) of that rate, one ``delay()`` per
   task, paced every 50 ms, with ``result_expires`` and ``dead_letter_ttl`` of
   ``--expires`` (600 s), and task history capped at 5 minutes' worth of tasks (so that its
   trimming is in the plateau too). The task mostly succeeds; 1 % raise once and retry a
   second later (``autoretry_for``), 0.2 % raise and are dead-lettered.

Every ``--interval`` (30 s) a sample goes to ``--json``: the broker's storage
(``benchmarks.soak_storage``: result rows or keys, dead letters, heartbeat records, the
RabbitMQ queue registry, history, and the bytes it spends: SQLite file + WAL, each
PostgreSQL table's total size with its dead tuples and autovacuum count, Redis
``used_memory``, the RabbitMQ node's queues, data directory and RSS plus its Redis
backend), the worker's RSS and PSS summed over its processes (``benchmarks.footprint``),
the backlog (waiting, running, oldest waiting age: is the worker keeping up), tasks
produced and processed, and the load average. On SQLite a probe process
(``benchmarks.soak_lock``) takes the write lock every 10 ms and logs the longest wait per
interval and over the run.

Then ``benchmarks.soak_report`` checks the targets (each size at the end at most 1.2 times its size
at the middle of the run, the minute 15 of 30; worker RSS within ±10 %; the SQLite write
lock never held over 100 ms) and prints them; ``make bench-soak-plot`` draws
docs/img/soak-*.png. Redis gets a ``redis-server`` of the run's own (``used_memory`` is
then only the soak's), and so does the RabbitMQ result backend. Not part of CI.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks import soak_report, soak_storage
from benchmarks.footprint import idle_worker, memory_kb, tree
from benchmarks.soak_lock import LockProbe

QUEUE = "soak"
APP = '''
from potatoq import Potatoq

app = Potatoq("soak", broker={broker!r})
app.conf.broker_transport_options = {broker_transport_options!r}
app.conf.result_backend = {result_backend!r}
app.conf.result_backend_transport_options = {result_backend_transport_options!r}
app.conf.result_expires = {expires!r}
app.conf.dead_letter_ttl = {expires!r}
app.conf.task_history_max_count = {history!r}


class Flaky(Exception):
    """Raised once by 1 % of the tasks: the task retries itself a second later."""


@app.task(
    name="soak.work",
    queue={queue!r},
    bind=True,
    autoretry_for=(Flaky,),
    retry_kwargs={{"countdown": 1, "max_retries": 3}},
)
def work(self, i):
    if i % 1000 in (500, 999):  # 0.2 %: fails, and is dead-lettered
        raise ValueError(f"soak: task {{i}} fails")
    if i % 100 == 7 and self.request.retries == 0:  # 1 %: fails once, then succeeds
        raise Flaky(i)
    return i
'''


class Run:
    """One phase on fresh storage: the app module, its worker and a producer."""

    def __init__(self, storage: soak_storage.Storage, tmp: Path, expires: float, history: int) -> None:
        self.storage = storage
        self.tmp = tmp
        name = f"soakapp_{os.getpid()}_{storage.__class__.__name__.lower()}_{int(time.time() * 1000)}"
        settings: dict[str, Any] = {
            "broker_transport_options": {},
            "result_backend": None,
            "result_backend_transport_options": {},
            **storage.settings(),
        }
        (tmp / f"{name}.py").write_text(
            APP.format(queue=QUEUE, expires=float(expires), history=history, **settings)
        )
        if str(tmp) not in sys.path:
            sys.path.insert(0, str(tmp))
        self.name = name
        self.module: ModuleType = importlib.import_module(name)
        self.sent = 0
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def worker(self) -> Iterator[int]:
        log = self.tmp / f"{self.name}.log"
        with idle_worker(self.tmp, QUEUE, timeout=120, app=self.name, log_path=log) as pid:
            yield pid
        # SQLite: the longest write transactions the worker's processes timed themselves
        for line in log.read_text(errors="replace").splitlines():
            if "held the database's write lock" in line:
                print(f"  worker: {line.strip()}", flush=True)

    def send(self) -> None:
        with self.lock:
            i, self.sent = self.sent, self.sent + 1
        self.module.work.delay(i)

    def send_group(self, n: int) -> None:
        from potatoq import group

        with self.lock:
            first, self.sent = self.sent, self.sent + n
        group(self.module.work.s(i) for i in range(first, first + n)).apply_async()

    def backlog(self) -> dict[str, float]:
        for stats in self.module.app.broker.queue_stats():
            if stats.queue == QUEUE:
                return {
                    "waiting": stats.waiting,
                    "delayed": stats.delayed,
                    "running": stats.running,
                    "oldest waiting s": stats.oldest_waiting_age or 0.0,
                }
        return {"waiting": 0, "delayed": 0, "running": 0, "oldest waiting s": 0.0}

    def processed(self, backlog: dict[str, float]) -> int:
        """Tasks sent less those still waiting, delayed (retries) or running."""
        return self.sent - int(backlog["waiting"] + backlog["delayed"] + backlog["running"])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.module.app.broker.close()
        sys.modules.pop(self.name, None)


def worker_memory(pid: int) -> dict[str, float]:
    pids = tree(pid)
    rss = pss = 0
    for each in pids:
        with contextlib.suppress(OSError):
            r, p = memory_kb(each)
            rss, pss = rss + r, pss + p
    return {"worker rss": rss * 1024, "worker pss": pss * 1024, "worker processes": len(pids)}


def measure_max(make: Any, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The worker's processed/s with its queue never empty (see the module doc)."""
    storage = make("max")
    run = Run(storage, tmp, args.expires, 1_000_000)
    stop = threading.Event()

    def fill() -> None:
        while not stop.is_set():
            if run.backlog()["waiting"] < 2000:
                run.send_group(500)
            else:
                stop.wait(0.25)

    try:
        run.send_group(2000)
        with run.worker():
            thread = threading.Thread(target=fill, daemon=True)
            thread.start()
            stop.wait(10)  # warm-up: the worker's first tasks, imports, connections
            load = os.getloadavg()
            start, done0 = time.monotonic(), run.processed(run.backlog())
            stop.wait(args.max_seconds)
            seconds, done = time.monotonic() - start, run.processed(run.backlog()) - done0
            stop.set()
            thread.join(60)
    finally:
        stop.set()
        run.close()
        storage.close()
    rate = done / seconds
    print(
        f"{storage.name}: maximum {rate:,.1f} processed/s ({done:,} in {seconds:.0f} s), load {_load(load)}"
    )
    return {"max rate": rate, "max tasks": done, "max seconds": seconds, "max load": list(load)}


def _load(load: tuple[float, ...] | list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


def soak(make: Any, args: argparse.Namespace, tmp: Path, out: Path) -> None:
    found = measure_max(make, args, tmp) if args.rate is None else {"max rate": None}
    rate = args.rate if args.rate is not None else found["max rate"] * args.fraction
    storage = make("soak")
    history = max(1000, int(rate * 300))
    run = Run(storage, tmp, args.expires, history)
    header = {
        "kind": "run",
        "broker": storage.name,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rate": rate,
        "fraction": args.fraction,
        "minutes": args.minutes,
        "expires": args.expires,
        "history max": history,
        "interval": args.interval,
        "load": list(os.getloadavg()),
        "cpus": os.cpu_count(),
        **found,
    }
    _write(out, header)
    print(f"{storage.name}: soak at {rate:,.1f}/s for {args.minutes} min (load {_load(header['load'])})")
    probe = None
    stop = threading.Event()
    try:
        if isinstance(storage, soak_storage.SQLiteStorage):
            run.module.app.broker.migrate()
            probe = LockProbe(storage.path)
            probe.start()
            time.sleep(5.0)  # the probe alone: what scheduling on this machine adds to a wait
            alone = probe.longest[0] * 1000
            _write(out, {"kind": "probe alone", "broker": storage.name, "longest ms": alone})
            probe.reset()
        with run.worker() as pid:
            producer = threading.Thread(target=_produce, args=(run, rate, stop), daemon=True)
            start = time.monotonic()
            producer.start()
            end = start + args.minutes * 60
            due = start
            while True:
                due = min(due + args.interval, end)
                stop.wait(max(0.0, due - time.monotonic()))
                sample = _sample(run, storage, pid, probe, start)
                _write(out, sample)
                _print_sample(storage.name, sample)
                if due >= end:
                    break
            stop.set()
            producer.join(60)
    finally:
        stop.set()
        if probe is not None:
            longest, at = probe.longest
            _write(out, {"kind": "lock", "broker": storage.name, "longest ms": longest * 1000, "at": at})
            probe.stop()
        run.close()
        storage.close()
    runs = soak_report.load([out]).get(storage.name)
    if runs is not None:
        soak_report.print_targets({storage.name: runs})


def _produce(run: Run, rate: float, stop: threading.Event) -> None:
    """``rate`` tasks a second, one ``delay()`` each, caught up every 50 ms."""
    start = time.monotonic()
    sent = 0
    while not stop.is_set():
        owed = int((time.monotonic() - start) * rate) - sent
        for _ in range(owed):
            run.send()
        sent += max(0, owed)
        stop.wait(0.05)


def _sample(
    run: Run, storage: soak_storage.Storage, pid: int, probe: LockProbe | None, start: float
) -> dict[str, Any]:
    began = time.monotonic()
    backlog = run.backlog()
    sample: dict[str, Any] = {
        "kind": "sample",
        "broker": storage.name,
        "t": began - start,
        "time": time.time(),
        "load": list(os.getloadavg()),
        "sent": run.sent,
        "processed": run.processed(backlog),
        **backlog,
        **worker_memory(pid),
        **storage.sample(),
    }
    if probe is not None:
        longest, control, over = probe.window()
        sample["lock wait ms"] = longest * 1000
        sample["control wait ms"] = control * 1000
        sample["waits over 100 ms"] = over
    sample["sample s"] = time.monotonic() - began
    return sample


def _print_sample(name: str, s: dict[str, Any]) -> None:
    lock = ""
    if "lock wait ms" in s:
        lock = f" lock {s['lock wait ms']:.0f} ms ({s['waits over 100 ms']} > 100 ms)"
        lock += f" control {s['control wait ms']:.0f} ms"
    print(
        f"{name} {s['t'] / 60:5.1f} min: processed {s['processed']:,} waiting {s['waiting']:,}"
        f" results {s.get('results', 0):,} dead {s.get('dead', 0):,} bytes {s.get(_bytes_key(name), 0):,.0f}"
        f" rss {s['worker rss'] / 2**20:.1f} MB{lock} load {s['load'][0]:.1f}",
        flush=True,
    )


def _bytes_key(name: str) -> str:
    return {cls.name: cls.BYTES for cls in STORAGES.values()}[name]


def _write(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


STORAGES: dict[str, type[soak_storage.Storage]] = {
    "sqlite": soak_storage.SQLiteStorage,
    "postgres": soak_storage.PostgresStorage,
    "redis": soak_storage.RedisStorage,
    "rabbitmq": soak_storage.RabbitMQStorage,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--brokers", default="sqlite,postgres,redis,rabbitmq", help="run one after the other")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--fraction", type=float, default=0.5, help="of the measured maximum rate")
    parser.add_argument("--rate", type=float, help="tasks/s for the soak: skips the maximum-rate phase")
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--expires", type=float, default=600.0, help="result_expires and dead_letter_ttl")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("POTATOQ_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test"),
    )
    parser.add_argument(
        "--rabbitmq-url",
        default="amqp://guest:guest@127.0.0.1:5694/",
        help="a RabbitMQ 4 node of its own (POTATOQ_RABBITMQ4_PORT=5694 scripts/services/rabbitmq4.sh start)",
    )
    parser.add_argument("--rabbitmq-ctl", default="bash scripts/services/rabbitmq4.sh ctl")
    parser.add_argument("--json", type=Path, default=Path("bench-soak.jsonl"))
    args = parser.parse_args()
    chosen = args.brokers.split(",")
    unknown = set(chosen) - set(STORAGES)
    if unknown:
        parser.error(f"--brokers: unknown {sorted(unknown)} (choose from {', '.join(STORAGES)})")
    print(f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {_load(os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="potatoq-soak-") as tmpname:
        tmp = Path(tmpname)
        redis_server = None
        try:
            for key in chosen:
                if key in ("redis", "rabbitmq") and redis_server is None:
                    redis_server = soak_storage.RedisServer(tmp)
                soak(_factory(key, args, tmp, redis_server), args, tmp, args.json)
        finally:
            if redis_server is not None:
                redis_server.close()


def _factory(key: str, args: argparse.Namespace, tmp: Path, server: Any) -> Any:
    def make(phase: str) -> soak_storage.Storage:
        tag = f"{phase}{uuid.uuid4().hex[:8]}"
        if key == "sqlite":
            return soak_storage.SQLiteStorage(tmp, tag)
        if key == "postgres":
            return soak_storage.PostgresStorage(args.postgres_url, tag)
        if key == "redis":
            return soak_storage.RedisStorage(server, tag)
        return soak_storage.RabbitMQStorage(args.rabbitmq_url, args.rabbitmq_ctl, server, tag)

    return make


if __name__ == "__main__":
    main()
