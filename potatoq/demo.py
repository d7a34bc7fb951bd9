"""``potatoq demo`` (what ``make demo`` runs): a real worker on a fresh SQLite file.

It starts ``potatoq -A potatoq.demo worker -c 2`` as a subprocess on a new database in a
temporary directory, sends a realistic mix (a chain, a chord fan-out, a task that fails
twice and then succeeds through ``self.retry()``, a countdown, and a periodic tick every
second from ``beat_schedule``), shows progress live, prints the results and where the
database and the worker's log are, and exits 0 once everything has finished.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from potatoq import Potatoq, Task, chain, chord

app = Potatoq("potatoq.demo", set_as_current=False)
app.conf.beat_schedule = {"tick": {"task": "demo.tick", "schedule": 1.0}}
app.conf.worker_heartbeat_interval = 1.0


def task(name: str, **options: Any) -> Callable[[Callable[..., Any]], Task]:
    """``app.task`` with a type mypy can follow."""
    decorator: Callable[[Callable[..., Any]], Task] = app.task(name=name, **options)
    return decorator


DEADLINE = 25.0
TICKS_WANTED = 3


@task("demo.add")
def add(x: int, y: int) -> int:
    return x + y


@task("demo.mul")
def mul(x: int, y: int) -> int:
    return x * y


@task("demo.square")
def square(x: int) -> int:
    time.sleep(0.05)  # a little work, so the fan-out is visible
    return x * x


@task("demo.total")
def total(values: list[int]) -> int:
    return sum(values)


@task("demo.flaky", bind=True, max_retries=5)
def flaky(self: Any, failures: int) -> str:
    """Fails ``failures`` times (as a flaky network call would), then succeeds."""
    if self.request.retries < failures:
        raise self.retry(exc=ConnectionError("upstream not ready"), countdown=0.3)
    return f"ok after {self.request.retries} retries"


@task("demo.tick")
def tick() -> float:
    """The periodic task: leaves a line in the demo directory for the progress display."""
    directory = os.environ.get("POTATOQ_DEMO_DIR")
    if directory:
        with open(Path(directory) / "ticks.log", "a") as f:
            f.write(f"{time.time():.3f}\n")
    return time.time()


class Display:
    """One status line, redrawn in place on a terminal, printed on change otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.last = ""

    def show(self, elapsed: float, state: str) -> None:
        if state == self.last and not self.tty:
            return
        self.last = state
        line = f"[{elapsed:4.1f}s] {state}"
        self.out.write("\r\033[K" + line if self.tty else line + "\n")
        self.out.flush()

    def done(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


def _ticks(directory: Path) -> int:
    try:
        return len((directory / "ticks.log").read_text().splitlines())
    except OSError:
        return 0


def run_demo(out: TextIO = sys.stdout) -> int:
    directory = Path(tempfile.mkdtemp(prefix="potatoq-demo-"))
    database = directory / "demo.sqlite3"
    url = f"sqlite:///{database}"
    log_path = directory / "worker.log"
    app.conf.broker_url = url
    app.close()
    app.broker.migrate()

    print(f"potatoq demo: a worker with 2 processes on {database}", file=out, flush=True)
    env = {**os.environ, "POTATOQ_DEMO_DIR": str(directory), "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            # -l info: the log the demo points to shows every task
            [
                sys.executable,
                "-m",
                "potatoq.cli",
                "-A",
                "potatoq.demo",
                "-b",
                url,
                "worker",
                "-c",
                "2",
                "-l",
                "info",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C here is handled below, not by the worker directly
        )
    try:
        return _drive(out, directory, database, log_path, worker)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        app.close()


def _drive(
    out: TextIO, directory: Path, database: Path, log_path: Path, worker: subprocess.Popen[bytes]
) -> int:
    started = time.monotonic()
    sent = {
        "chain   add(2,3) | mul(10) | add(7)": chain(add.s(2, 3), mul.s(10), add.s(7)).apply_async(),
        "chord   sum(square(i) for i in 0..9)": chord(square.s(i) for i in range(10))(total.s()),
        "retry   flaky(2): fails twice, then succeeds": flaky.delay(2),
        "delay   add(20, 22) with countdown=2s": add.apply_async((20, 22), countdown=2),
    }
    expected: dict[str, Any] = dict(zip(sent, [57, 285, "ok after 2 retries", 42], strict=True))
    display = Display(out)
    finished: dict[str, Any] = {}
    while True:
        for label, result in sent.items():
            if label not in finished and result.ready():
                finished[label] = result.result
        ticks = _ticks(directory)
        waiting = running = 0
        for stats in app.broker.queue_stats():
            waiting += stats.waiting + stats.delayed
            running += stats.running
        elapsed = time.monotonic() - started
        display.show(
            elapsed,
            f"done {len(finished)}/{len(sent)}  periodic ticks {ticks}/{TICKS_WANTED}  "
            f"queued {waiting}  running {running}",
        )
        if len(finished) == len(sent) and ticks >= TICKS_WANTED:
            break
        if worker.poll() is not None or elapsed > DEADLINE:
            display.done()
            why = "the worker exited" if worker.poll() is not None else f"not finished after {DEADLINE:g}s"
            print(f"potatoq demo: FAILED, {why}; see {log_path}", file=out, flush=True)
            return 1
        time.sleep(0.1)
    display.done()
    ok = True
    print("\nresults:", file=out)
    for label, value in finished.items():
        good = value == expected[label]
        ok = ok and good
        print(f"  {'ok ' if good else 'BAD'} {label:<46} -> {value!r}", file=out)
    print(f"  ok  {'tick    demo.tick every 1s from beat_schedule':<46} -> {ticks} runs", file=out)
    print(f"\ndatabase:   {database}", file=out)
    print(f"worker log: {log_path}", file=out)
    print(f"(inspect with sqlite3, or remove with: rm -rf {directory})", file=out, flush=True)
    return 0 if ok else 1


def main() -> int:
    return run_demo()


if __name__ == "__main__":
    sys.exit(main())
