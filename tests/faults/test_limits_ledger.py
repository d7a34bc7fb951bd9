"""Concurrency-limit ledger: cluster-wide limits hold across workers, also while children
are SIGKILLed mid-task, and no slot leaks.

Two workers of two children each (4 processes) drain a mix of ``faults.span`` tasks: a
name-wide limit of 3 (``spans.wide``), per-key limits of 1 (``spans.per_key[acme]`` and
``[globex]``) and unlimited ones, while the test SIGKILLs a random child that is running a
task about every 300 ms.
Every run logs its start and end with the wall clock. Replaying the log, a run ends at its
end line or, for a killed process, at the moment the test sent SIGKILL (its slot is given
back later than that, never earlier), so the replay can only overstate concurrency. It
must never show more runs of a limit key at once than its limit; different keys and
unlimited tasks must have run side by side (a limit holds back only its own key); and once
drained, every limit's usage is back to 0.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest

from potatoq.states import SUCCESS

from .harness import FULL, FaultEnv, client, drained, report, sized, wait_for

# RabbitMQ with each result backend that holds its slots (the SQLite one shares the PostgreSQL
# one's store_sql.py: under POTATOQ_FAULTS_FULL=1 only, to keep the default run short).
LEDGER_BROKERS = [
    "sqlite",
    "postgres",
    "redis",
    "valkey",
    "redis-cluster",
    "rabbitmq+redis",
    "rabbitmq+postgres",
]
LEDGER_BROKERS += ["rabbitmq+sqlite"] if FULL else []
KILL_EVERY = 0.3
LIMITS = {"wide": 3, "acme": 1, "globex": 1}


def _replay(lines: list[str], killed_at: dict[int, float]) -> tuple[dict[str, int], int]:
    """(most runs at once per key, most distinct keys running at once) from the span log."""
    events: list[tuple[float, int, str, str]] = []  # (time, order, kind, run) ends sort first
    keys: dict[str, str] = {}
    ended: set[str] = set()
    pids: dict[str, int] = {}
    for line in lines:
        kind, task_id, pid, key, at = line.split()
        run = f"{task_id}@{pid}"
        keys[run] = key
        pids[run] = int(pid)
        if kind == "S":
            events.append((float(at), 1, "S", run))
        else:
            ended.add(run)
            events.append((float(at), 0, "E", run))
    for run, pid in pids.items():
        if run not in ended:
            assert pid in killed_at, f"run {run} never ended and its process was not killed"
            events.append((killed_at[pid], 0, "E", run))
    events.sort()
    running: dict[str, set[str]] = defaultdict(set)
    most: dict[str, int] = defaultdict(int)
    most_keys = 0
    for _, _, kind, run in events:
        key = keys[run]
        if kind == "S":
            running[key].add(run)
            most[key] = max(most[key], len(running[key]))
            most_keys = max(most_keys, sum(1 for runs in running.values() if runs))
        else:
            running[key].discard(run)
    return dict(most), most_keys


def _running_pids(path: Path) -> dict[int, str]:
    """Processes whose last span line is a start (they are running a task now): their task."""
    if not path.exists():
        return {}
    last: dict[int, tuple[str, str]] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5:
            last[int(parts[2])] = (parts[0], parts[1])
    return {pid: task_id for pid, (kind, task_id) in last.items() if kind == "S"}


@pytest.mark.slow
@pytest.mark.parametrize("fault_env", LEDGER_BROKERS, indirect=True)
def test_concurrency_limits_hold_while_children_are_killed(fault_env: FaultEnv) -> None:
    env = fault_env
    per_kind = sized(40, 200)
    rng = random.Random()
    env.conf.update(worker_dead_after=3.0, worker_heartbeat_interval=0.5)
    if "broker_transport_options" in env.conf and env.name.startswith("rabbitmq"):
        # a killed child's slot comes back when its lease runs out (the default is 20 s)
        env.conf["broker_transport_options"]["limit_lease"] = 2.0
    with client(env) as proj:
        app = proj.app
        messages = []
        for _ in range(per_kind):
            work = rng.uniform(20, 60)
            messages.append(app.make_message("faults.span", ("wide", work), concurrency_limit=3))
            for key in ("acme", "globex"):
                messages.append(
                    app.make_message("faults.span", (key, work), concurrency_limit=1, concurrency_key=key)
                )
            messages.append(app.make_message("faults.span", ("free", work)))
        rng.shuffle(messages)
        app.send_messages(messages)
        ids = [m.id for m in messages]
        done: set[str] = set()

        workers = [env.worker("-c", "2", "-l", "info") for _ in range(2)]
        killed_at: dict[int, float] = {}
        kills_of: collections.Counter[str] = collections.Counter()
        next_kill = time.monotonic() + KILL_EVERY
        deadline = time.monotonic() + 240
        while True:
            if drained(app.broker, ids, done):
                break
            assert time.monotonic() < deadline, f"not drained: {app.broker.queue_stats()}, {len(done)} done"
            if time.monotonic() >= next_kill:
                next_kill += KILL_EVERY
                # Only a child in the middle of a task: that is what must give its slot
                # back, and a child killed while starting up makes its supervisor back off.
                # Each kill counts a delivery of the task it interrupts, and the fifth
                # dead-letters it (task_max_deliveries): the storm hits a task twice at most,
                # or an unlucky one (the only running task of its key) ends as a dead letter.
                busy = _running_pids(env.dir / proj.SPANS)
                children = [
                    pid
                    for w in workers
                    if w.alive()
                    for pid in w.children()
                    if pid in busy and kills_of[busy[pid]] < 2
                ]
                if children:
                    pid = rng.choice(children)
                    kills_of[busy[pid]] += 1
                    killed_at.setdefault(pid, time.time())
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

        results = {i: app.broker.get_result(i) for i in ids}
        lost = [i for i, r in results.items() if r is None or r.state != SUCCESS]

        # Runs killed mid-task released their slot through the supervisor's requeue (or
        # recovery): nothing may stay counted once everything is done.
        def settled_usage() -> list[object] | None:
            usage = app.broker.limits()
            return [usage] if all(u.running == 0 for u in usage) else None

        usage = wait_for(settled_usage, what="every limit's usage back to 0")[0]
        path = env.dir / proj.SPANS
        most, most_keys = _replay(path.read_text().splitlines(), killed_at)
        keys = {"wide": "faults.span", "acme": "faults.span[acme]", "globex": "faults.span[globex]"}
        report(
            "concurrency ledger",
            env.name,
            tasks=len(ids),
            child_kills=len(killed_at),
            most_at_once=most,
            most_keys_at_once=most_keys,
            lost=len(lost),
        )
        for worker in workers:
            worker.stop()

    assert not lost, f"{len(lost)} tasks lost, e.g. {lost[:5]}"
    for kind, limit in LIMITS.items():
        assert most.get(kind, 0) <= limit, f"{keys[kind]} ran {most[kind]} at once; its limit is {limit}"
    assert most["wide"] >= 1 and most["acme"] >= 1 and most["globex"] >= 1
    assert most_keys >= 2, "limited keys never ran beside each other or beside unlimited tasks"
    assert killed_at, "the storm never killed a child"
    assert all(u.running == 0 for u in usage)
