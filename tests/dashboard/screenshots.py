"""Make docs/img/dashboard-*.png: a real worker, real tasks, the dashboard, headless Chromium.

    PYTHONPATH=. python -m tests.dashboard.screenshots docs/img [PAGE ...]

With PAGE names (``overview``, ``workers``, ``task``, ``task-waiting``, ``task-canvas``,
``dead-letters``, ``history``, ``schedules``, ``overview-narrow``) only those images are
rewritten, so that a change to one page doesn't churn every image in the repository.

A ``potatoq worker`` subprocess (the tests' ``tests.worker.proj`` app) runs on a temp
SQLite file; this script sends it work (two tasks that block so the workers page has
something running, bursts of quick ones for the chart, delayed ones, a delayed chain whose
first step is shown waiting, one unknown task that becomes a dead letter, a chain into a
chord whose member's page shows its workflow), serves the dashboard with uvicorn and
screenshots each page with ``chromium --headless --screenshot``.
The periodic entry ``heartbeat-check`` fires every 10 s, so its last run is on record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from potatoq import group
from potatoq.dashboard import create_app
from tests.dashboard.browser import CHROMIUM, serve

ROOT = Path(__file__).resolve().parents[2]


def shoot(url: str, out: Path, width: int, height: int) -> None:
    subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--window-size={width},{height}", f"--screenshot={out}", "--virtual-time-budget=2000", url,
        ],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    print(f"wrote {out}")


def main(target: str, only: frozenset[str] = frozenset()) -> int:
    out_dir = Path(target)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="potatoq-shots-"))
    marks = tmp / "marks"
    marks.mkdir()
    url = f"sqlite:///{tmp / 'broker.sqlite3'}"
    schedule = {
        "heartbeat-check": {"task": "proj.add", "schedule": 10.0, "args": [1, 1]},
        "nightly-report": {"task": "proj.pid", "schedule": 86400.0},
    }
    os.environ.update(POTATOQ_BROKER_URL=url, POTATOQ_TEST_DIR=str(marks))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "POTATOQ_TEST_CONF": json.dumps({"beat_schedule": schedule, "result_extended": True}),
    }
    from tests.worker import proj

    proj.app.conf.broker_url = url
    proj.app.conf.result_extended = True
    proj.app.conf.beat_schedule = schedule
    proj.app.close()
    log = (tmp / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "potatoq.cli", "-A", "tests.worker.proj", "worker",
         "-c", "2", "-Q", "default,emails"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    board = create_app(proj.app, sample_every=1.0)
    try:
        with serve(board) as base:
            urllib.request.urlopen(base).close()  # the first request starts the throughput sampler
            first = proj.add.delay(20, 22)
            first.get(timeout=30)
            # a chain into a chord: its second step is a group, so its third is the chord's callback
            flow = (
                proj.add.s(1, 1) | group(proj.add.s(n) for n in range(3)) | proj.add.si(4, 4)
            ).apply_async()
            flow.get(timeout=30)
            member = flow.parent.results[1].id
            for burst in range(8):
                for n in range(5 + 4 * burst):
                    proj.add.delay(n, burst)
                time.sleep(1.0)
            proj.app.send_task("proj.resize_image", args=("cat.png",), kwargs={"width": 640})  # unknown
            proj.block.apply_async(("report-a",), {"release": "go", "timeout": 120})
            proj.block.apply_async(("report-b",), {"release": "go", "timeout": 120})
            for n in range(7):
                proj.add.apply_async((n, n), queue="emails", countdown=600 + n)
            steps = proj.add.s(2, 2).set(countdown=900, queue="emails", priority=5) | proj.add.s(8)
            waiting = steps.apply_async().parent
            deadline = time.monotonic() + 30
            while not (marks / "started-report-a").exists() or not (marks / "started-report-b").exists():
                if time.monotonic() > deadline:
                    raise SystemExit("the blocking tasks didn't start; see " + str(tmp / "worker.log"))
                time.sleep(0.05)
            for n in range(12):
                proj.add.delay(n, n)  # waiting behind the two blocked children
            while not proj.app.broker.last_fire_times(["heartbeat-check"]):
                if time.monotonic() > deadline + 30:
                    raise SystemExit("the scheduler recorded no fire time; see " + str(tmp / "worker.log"))
                time.sleep(0.1)
            time.sleep(2.5)  # two more samples, and a heartbeat that reports the running tasks
            dead = proj.app.broker.list_dead()
            pages = [
                ("overview", "/", 1280, 900),
                ("workers", "/workers", 1280, 700),
                ("task", f"/tasks/{first.id}", 1280, 700),
                ("task-waiting", f"/tasks/{waiting.id}", 1280, 760),
                ("task-canvas", f"/tasks/{member}", 1280, 1000),
                ("dead-letters", "/dead", 1280, 700),
                ("history", "/history?limit=12", 1280, 1100),
                ("schedules", "/schedules", 1280, 500),
                ("overview-narrow", "/", 390, 1100),
            ]
            for name, path, width, height in pages:
                if not only or name in only:
                    shoot(f"{base}{path}", out_dir / f"dashboard-{name}.png", width, height)
            print(f"dead letters: {[d.reason for d in dead]}")
            (marks / "go").write_text("null")
    finally:
        worker.terminate()
        worker.wait(30)
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/img", frozenset(sys.argv[2:])))
