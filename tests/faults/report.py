"""Run the fault suite at full size and write docs/reliability-figures.md (``make reliability``).

``python -m tests.faults.report [--out PATH] [-- PYTEST ARGS]`` runs ``pytest tests/faults`` with
``POTATOQ_FAULTS_FULL=1`` (the full sizes: a 2,000-task kill storm per broker, three
restarts per server broker, ...). Every scenario asserts its own figures and hands them to
``harness.report``, which appends them to a JSON-lines file; this module renders that
file, the skipped and expected-to-fail scenarios with their reasons, and the machine the
run was on. The page is written even when a scenario failed (its row is then missing and
the pytest summary says so), and the exit status is pytest's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.faults.servers import RABBITMQ_ROOTFS

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "docs" / "reliability-figures.md"

Row = dict[str, Any]


def run_suite(figures: Path, pytest_args: Sequence[str]) -> tuple[int, list[str]]:
    """Run the fault suite at full size; (exit status, its summary lines)."""
    env = {**os.environ, "POTATOQ_FAULTS_FULL": "1", "POTATOQ_FAULTS_FIGURES": str(figures)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", "tests/faults", "-q", "-rsxX", "-p", "no:cacheprovider"]
    proc = subprocess.Popen(
        [*command, *pytest_args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    summary: list[str] = []
    for line in proc.stdout:
        sys.stdout.write(line)
        if re.match(r"^(SKIPPED|XFAIL|XPASS|FAILED|ERROR) ", line) or re.search(r"\d+ (passed|failed)", line):
            summary.append(line.rstrip())
    return proc.wait(), summary


def _version(command: list[str], pattern: str) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return "not found"
    found = re.search(pattern, out)
    return found.group(1) if found else "unknown"


def machine() -> list[tuple[str, str]]:
    cpu = "unknown"
    with open("/proc/cpuinfo", encoding="utf-8") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = "unknown"
    with open("/proc/meminfo", encoding="utf-8") as info:
        for line in info:
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    rootfs = RABBITMQ_ROOTFS
    rabbit = _version(
        ["dpkg-query", f"--admindir={rootfs}/var/lib/dpkg", "-W", "-f=${Version}", "rabbitmq-server"],
        r"^(\S+)",
    )
    return [
        ("date", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")),
        ("CPU", f"{cpu}, {os.cpu_count()} cores"),
        ("memory", memory),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
        ("SQLite", sqlite3.sqlite_version),
        ("PostgreSQL", _version(["/usr/lib/postgresql/15/bin/postgres", "--version"], r"(\d+\.\d+)")),
        ("Redis", _version(["redis-server", "--version"], r"v=(\S+)")),
        ("RabbitMQ", rabbit),
    ]


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return ["(no run recorded: see the summary below)", ""]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _of(rows: list[Row], scenario: str) -> list[Row]:
    return [r for r in rows if r["scenario"] == scenario]


SECTIONS: list[tuple[str, str, list[str], Callable[[Row], list[Any]]]] = [
    (
        "kill storm",
        (
            "2 workers x 2 children drain the tasks while a random child is SIGKILLed every 200 ms (every "
            "second on RabbitMQ, whose children take about a second to connect and subscribe) and "
            "a whole worker (supervisor and children, its process group) is SIGKILLed twice and "
            "restarted; `worker_dead_after` = 3 s. *Extra executions* are runs beyond one per task: "
            "each one was in a process the test killed (asserted). *Requeued by the supervisor*: "
            "tasks of a killed child that its supervisor found with `Broker.held_by` and requeued at "
            "once (on these brokers children don't report each task to their supervisor). *Claims "
            "committed after the reap*: claims a killed child's statement committed on the server "
            "after its supervisor had reaped it and asked `held_by`, found by the next recovery round "
            "(`Broker.orphaned`; on Redis by asking `held_by` again a round after the reap) and requeued."
        ),
        [
            "broker",
            "tasks",
            "child kills",
            "worker kills",
            "lost",
            "dead letters",
            "extra executions",
            "tasks run twice+",
            "requeued by the supervisor",
            "claims committed after the reap",
            "time to drain",
        ],
        lambda r: [
            r["broker"],
            r["tasks"],
            r["child_kills"],
            f"{r['worker_kills']} (restarted {r['restarts']})",
            r["lost"],
            r["dead_letters"],
            r["extra_executions"],
            r["tasks_run_twice_or_more"],
            r["requeued_by_supervisor"],
            r.get("orphaned_claims", "n/a"),
            f"{r['drain_seconds']} s",
        ],
    ),
    (
        "poison",
        (
            "A worker of 2 children gets 3 poison tasks (each SIGKILLs the process that runs it) among "
            "ordinary ones; `task_max_deliveries` = 5. *Runs each*: how many times each poison task ran "
            "(asserted: exactly 5, with delivery counts 1 to 5), then it is dead-lettered; the ordinary "
            "tasks all complete."
        ),
        ["broker", "poison tasks", "runs each", "dead-lettered", "ordinary tasks", "ordinary lost"],
        lambda r: [
            r["broker"],
            r["poison_tasks"],
            ", ".join(str(n) for n in r["runs_each"]),
            r["dead_letters"],
            r["ordinary_tasks"],
            r["ordinary_lost"],
        ],
    ),
    (
        "broker restart",
        (
            'A private server (redis-server with `--save ""` and an fsynced AOF; an initdb cluster; a '
            "private RabbitMQ 4 node) is stopped mid-run and started again: cleanly first, abruptly "
            "(SIGKILL / immediate shutdown) the next time. A producer calls `.delay()` every 20 ms "
            "throughout; `broker_connection_timeout` = 2 s. *Resumed after*: how long a task sent right "
            "after each restart took to complete. *Lost* counts tasks whose `.delay()` returned."
        ),
        [
            "broker",
            "restarts",
            "tasks sent",
            ".delay() refused",
            "slowest .delay()",
            "resumed after",
            "lost",
            "time to drain",
            "outage log lines",
        ],
        lambda r: [
            r["broker"],
            ", ".join(r["outages"]),
            r["tasks_sent"],
            r["delay_refused"],
            f"{r['slowest_delay_seconds']} s",
            ", ".join(f"{s} s" for s in r["resumed_after_seconds"]),
            r["lost"],
            f"{r['drain_seconds']} s",
            r["unreachable_log_lines"],
        ],
    ),
    (
        "fencing",
        (
            "Worker A's process group is frozen with SIGSTOP while it runs a task; B gets the task once A "
            "is silent (heartbeats / leases after `worker_dead_after`; RabbitMQ after its AMQP heartbeat "
            "times out) and completes it; then A is resumed with SIGCONT and settles late."
        ),
        [
            "broker",
            "silent after",
            "redelivered after",
            "late settle refused and logged",
            "stored result is the new delivery's",
        ],
        lambda r: [
            r["broker"],
            r["silent_after"],
            f"{r['redelivered_after_seconds']} s",
            "yes" if r["late_settle_refused"] else "no",
            "yes" if r["result_is_new_delivery"] else "**no**",
        ],
    ),
    (
        "bad input",
        (
            "Refused at enqueue: an oversized payload, non-JSON arguments, 9 hostile queue names (and a "
            "dotted one where dots are reserved). Written into storage or sent by name, then dead-lettered "
            "by the worker with the reason: garbage, a truncated message, an unknown version, arguments "
            "that aren't a list, tagged values that don't parse (Decimal, timedelta, UUID, datetime), a "
            "non-finite priority, a message over task_max_message_size, bytes that would forge a terminal "
            "line or inject HTML, arguments nested 100,000 deep, an unknown task name. One worker, never "
            "restarted; a good task sent after them completes."
        ),
        ["broker", "refused at enqueue", "dead-lettered", "worker restarts", "good task after"],
        lambda r: [
            r["broker"],
            r["refused_at_enqueue"],
            r["dead_lettered"],
            r["worker_restarts"],
            r["good_task_after"],
        ],
    ),
    (
        "sqlite killed mid-write",
        (
            "Writers SIGKILLed at random moments: batch enqueues of 2,000 messages (one transaction "
            "each), then claim-and-settle loops writing a result and two follow-ups per task."
        ),
        ["kills", "integrity_check", "tasks enqueued", "settled", "held by a killed settler (recovered)"],
        lambda r: [
            r["kills"],
            r["integrity"],
            r["tasks_enqueued"],
            r["settled"],
            r["held_by_killed_settler"],
        ],
    ),
    (
        "sqlite full disk",
        "The database on a tmpfs of its own fills the disk.",
        ["disk", "committed before full", "error", "integrity_check", "usable after freeing space"],
        lambda r: [
            r["disk"],
            r["committed_before_full"],
            f"`{r['error']}`",
            r["integrity"],
            "yes" if r["usable_after_freeing_space"] else "no",
        ],
    ),
    (
        "credentials in logs",
        (
            "A worker at debug level and `potatoq migrate`, with a password in the broker URL, against a "
            "live server and against a port where nothing listens."
        ),
        ["broker", "log and CLI lines checked", "lines showing the password"],
        lambda r: [r["broker"], r["log_and_cli_lines_checked"], r["lines_with_the_password"]],
    ),
]


def render(rows: list[Row], summary: list[str], status: int) -> str:
    out = [
        "# Reliability figures",
        "",
        "<!-- Generated by `make reliability` (tests/faults/report.py); don't edit by hand. -->",
        "",
        (
            "What the fault-injection suite (`tests/faults/`) measured when it last ran at full size. "
            "Each figure is also an assertion of the suite: `make test` runs the same scenarios, "
            "smaller. What the promises are: [reliability](reliability.md); the security defaults: "
            "[security](security.md)."
        ),
        "",
        "## Machine",
        "",
        *_table(["", ""], [list(item) for item in machine()]),
    ]
    for scenario, explanation, headers, cells in SECTIONS:
        title = scenario.replace("sqlite", "SQLite")
        title = title[0].upper() + title[1:]
        out += [f"## {title}", "", explanation, ""]
        out += _table(headers, [cells(r) for r in _of(rows, scenario)])
    out += ["## Summary of the run", "", f"pytest exit status {status}.", ""]
    out += [f"- `{line}`" for line in summary] + [""]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the Markdown page to write")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        figures = Path(tmp) / "figures.jsonl"
        figures.touch()
        status, summary = run_suite(figures, args.pytest_args)
        rows = [json.loads(line) for line in figures.read_text().splitlines() if line.strip()]
    args.out.write_text(render(rows, summary, status))
    print(f"wrote {args.out} ({len(rows)} scenario runs)")
    return status


if __name__ == "__main__":
    sys.exit(main())
