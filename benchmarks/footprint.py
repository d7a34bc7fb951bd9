"""``make bench-footprint``: what an idle ``-c 2`` worker costs, per broker.

For each broker, starts ``potatoq worker -c 2`` on an app with one task and an empty queue of
its own, waits for its "ready" log line (the supervisor logs it after forking the children),
then sums over the worker's processes (the supervisor and its children):

* RSS and PSS (``/proc/PID/smaps_rollup``; PSS splits pages shared after ``fork()`` between
  the processes sharing them, so the PSS sum is what the worker adds to the machine), and
* the CPU time all of them use over ``--seconds`` while idle, as a percentage of one core.

``--busy-writer`` adds two SQLite rows: a thread of the benchmark commits unrelated writes
(another table in the same database file, a commit per millisecond or so) while the worker
idles, and then one that enqueues tasks to another queue through potatoq (whose commits
ring the worker's doorbell), to show whether idle waits turn into polling on a busy
database.

Prints a markdown table. Not part of CI.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import selectors
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
URLS = {
    "sqlite": "",  # a file in the run's temporary directory
    "redis": os.environ.get("POTATOQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"),
    "postgres": os.environ.get("POTATOQ_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test"),
    "rabbitmq": os.environ.get("POTATOQ_BENCH_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/"),
}
APP = """
from potatoq import Potatoq

app = Potatoq("footprint", broker={url!r})
app.conf.broker_transport_options = {options!r}


@app.task
def noop():
    return None
"""
TICKS = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    with contextlib.suppress(FileNotFoundError):
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(p) for p in text.split()]
    return []


def tree(pid: int) -> list[int]:
    pids = [pid]
    for child in children(pid):
        pids.extend(tree(child))
    return pids


def memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in kB from smaps_rollup."""
    rss = pss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "Rss":
            rss = int(value.split()[0])
        elif key == "Pss":
            pss = int(value.split()[0])
    return rss, pss


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def broker_setup(broker: str, tmp: Path) -> tuple[str, dict[str, object]]:
    tag = uuid.uuid4().hex[:8]
    if broker == "sqlite":
        return f"sqlite:///{tmp / 'footprint.sqlite3'}", {}
    if broker == "redis":
        return URLS["redis"], {"global_keyprefix": f"footprint-{tag}"}
    if broker == "postgres":
        return URLS["postgres"], {"schema": f"footprint_{tag}"}
    return URLS[broker], {}


def drop(broker: str, url: str, options: dict[str, object]) -> None:
    if broker == "postgres":
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{options["schema"]}" CASCADE')
    elif broker == "redis":
        import redis

        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=f"{options['global_keyprefix']}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


@contextlib.contextmanager
def idle_worker(
    app_dir: Path, queue: str, timeout: float = 60.0, app: str = "fpapp", log_path: Path | None = None
) -> Iterator[int]:
    """Start ``potatoq worker -c 2`` on the module ``app`` of ``app_dir``; yield the
    supervisor's pid once it logged "ready". Its log goes on to ``log_path``, when given."""
    env = dict(os.environ, PYTHONPATH=f"{app_dir}{os.pathsep}{ROOT}")
    cmd = [
        str(Path(sys.executable).with_name("potatoq")),
        "-A",
        app,
        "worker",
        "-c",
        "2",
        "-Q",
        queue,
        "-l",
        "info",
    ]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    try:
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        log: list[str] = []
        while True:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("worker did not get ready:\n" + "".join(log[-20:]))
            if sel.select(1.0):
                line = proc.stderr.readline()
                log.append(line)
                if " ready" in line:
                    break
        sel.close()
        # keep draining its log so a full pipe never blocks it
        threading.Thread(target=_drain, args=(proc.stderr, log, log_path), daemon=True).start()
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _drain(stream: IO[str], head: list[str], log_path: Path | None) -> None:
    if log_path is None:
        for _ in stream:
            pass
        return
    with log_path.open("a") as log:
        log.writelines(head)
        for line in stream:
            log.write(line)
            log.flush()


def busy_writer(path: Path, stop: threading.Event, counter: list[int]) -> None:
    """Commits to a table potatoq doesn't know, as another program would."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS unrelated (id INTEGER PRIMARY KEY, v TEXT)")
    while not stop.is_set():
        conn.execute("INSERT INTO unrelated (v) VALUES ('x')")
        counter[0] += 1
        stop.wait(0.001)
    conn.close()


def busy_enqueuer(path: Path, stop: threading.Event, counter: list[int]) -> None:
    """Enqueues to a queue the worker doesn't consume, through potatoq (its commits ring)."""
    from potatoq.brokers import create_broker
    from potatoq.brokers.base import BrokerConfig
    from potatoq.message import Message, new_id

    broker = create_broker(BrokerConfig(url=f"sqlite:///{path}"))
    while not stop.is_set():
        broker.enqueue([Message(id=new_id(), task="elsewhere.noop", queue="elsewhere")])
        counter[0] += 1
        stop.wait(0.001)
    broker.close()


WRITERS = {"busy writer": busy_writer, "busy potatoq enqueuer": busy_enqueuer}


def measure(broker: str, seconds: float, settle: float, writer: str | None) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="potatoq-footprint-") as tmpname:
        tmp = Path(tmpname)
        url, options = broker_setup(broker, tmp)
        (tmp / "fpapp.py").write_text(APP.format(url=url, options=options))
        queue = f"footprint-{uuid.uuid4().hex[:8]}"
        try:
            with idle_worker(tmp, queue) as pid:
                time.sleep(settle)  # let start-up chores (first heartbeat, recovery) pass
                pids = tree(pid)
                stop = threading.Event()
                commits = [0]
                thread = None
                if writer is not None:
                    thread = threading.Thread(
                        target=WRITERS[writer], args=(tmp / "footprint.sqlite3", stop, commits)
                    )
                    thread.start()
                before = [cpu_ticks(p) for p in pids]
                start = time.monotonic()
                time.sleep(seconds)
                used = [cpu_ticks(p) - b for p, b in zip(pids, before, strict=True)]
                elapsed = time.monotonic() - start
                stop.set()
                if thread is not None:
                    thread.join()
                mem = [memory_kb(p) for p in pids]
        finally:
            drop(broker, url, options)
    return {
        "broker": broker + (f" + {writer}" if writer else ""),
        "processes": len(pids),
        "rss_mb": sum(r for r, _ in mem) / 1024,
        "pss_mb": sum(p for _, p in mem) / 1024,
        "per_process": ", ".join(f"{r / 1024:.0f}" for r, _ in mem),
        "cpu_pct": 100.0 * sum(used) / TICKS / elapsed,
        "cpu_per_process": ", ".join(f"{100.0 * u / TICKS / elapsed:.2f}" for u in used),
        "commits_s": commits[0] / elapsed if writer else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", default="sqlite,redis,postgres", help="comma-separated (also: rabbitmq)")
    parser.add_argument("--seconds", type=float, default=30.0, help="idle CPU measured over this long")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after ready before measuring")
    parser.add_argument("--busy-writer", action="store_true", help="also SQLite with a process committing")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    for broker in args.brokers.split(","):
        rows.append(measure(broker, args.seconds, args.settle, writer=None))
        if broker == "sqlite" and args.busy_writer:
            for writer in WRITERS:
                rows.append(measure(broker, args.seconds, args.settle, writer=writer))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print(
        "| broker | processes | RSS (MB) | PSS (MB) | RSS per process (MB) "
        "| idle CPU (% of a core) | CPU per process (%) |"
    )
    print("|---|---:|---:|---:|---|---:|---|")
    for row in rows:
        extra = f" ({row['commits_s']:.0f} commits/s)" if row["commits_s"] is not None else ""
        print(
            f"| {row['broker']}{extra} | {row['processes']} | {row['rss_mb']:.1f} | {row['pss_mb']:.1f} "
            f"| {row['per_process']} | {row['cpu_pct']:.2f} | {row['cpu_per_process']} |"
        )


if __name__ == "__main__":
    main()
