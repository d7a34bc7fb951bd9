"""Kill storm: SIGKILL worker children at random, and whole workers twice; nothing is lost.

Two workers of two children drain a batch of ``faults.record`` tasks while the test SIGKILLs
a random child about every 200 ms, and twice SIGKILLs a whole worker (supervisor and children,
its process group) and starts a new one. The killed supervisor's tasks come back through
recovery once its heartbeat is older than ``worker_dead_after`` (3 s here); a killed child's
task is requeued by its supervisor at once.

After draining: every task completed (lost = 0), nothing is left waiting or running, and a
task ran more than once only when the earlier runs were in processes the test killed (each
run is on record with its pid and parent pid before the task does its work).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections import Counter

import pytest

from potatoq.states import SUCCESS
from potatoq.worker.ipc import reports_every_task

from .harness import FaultEnv, Worker, client, report, sized, wait_for

STORM_BROKERS = ["sqlite", "postgres", "redis"]
# The storm itself also runs on RabbitMQ (the shared RabbitMQ 4 node, a queue prefix per
# test); the claim races below are of brokers whose claim is a statement a test can replay.
KILL_STORM_BROKERS = [*STORM_BROKERS, "rabbitmq"]
KILL_EVERY = 0.2  # seconds between child kills
# A RabbitMQ child needs about a second to connect, declare and subscribe (seen in the
# storm's logs): killed every 200 ms, most children die before their first task, the
# supervisor backs off (children that fail at start), and the storm barely drains.
KILL_EVERY_BY_BROKER = {"rabbitmq": 1.0}
WHOLE_WORKER_KILLS = 2


def _remaining(broker: object) -> tuple[int, int]:
    """(waiting + delayed, running) over every queue."""
    stats = broker.queue_stats()  # type: ignore[attr-defined]
    return sum(s.waiting + s.delayed for s in stats), sum(s.running for s in stats)


class _Unsettled:
    """(left, 0) from the result store, for a broker whose queue counts can't tell when the
    storm is over: RabbitMQ's ``queue_stats`` has no running count (unacked messages aren't
    reported) and reads its registry of queues with a consumer, so a read racing the workers'
    own can come back empty and say 0 while tasks wait. Asks only for the tasks not yet
    seen settled, so each call gets cheaper."""

    def __init__(self, broker: object, ids: list[str]) -> None:
        self.broker = broker
        self.left = set(ids)
        self.asked = 0.0

    def __call__(self) -> tuple[int, int]:
        if time.monotonic() - self.asked >= 0.25:  # the loop polls every 20 ms: ask less often
            self.asked = time.monotonic()
            self.left = {i for i in self.left if self.broker.get_result(i) is None}  # type: ignore[attr-defined]
        return len(self.left), 0


@pytest.mark.slow
@pytest.mark.parametrize("fault_env", KILL_STORM_BROKERS, indirect=True)
def test_kill_storm_loses_nothing(fault_env: FaultEnv) -> None:
    env = fault_env
    count = sized(500, 2000)
    rng = random.Random()
    env.conf.update(worker_dead_after=3.0, worker_heartbeat_interval=0.5)
    with client(env) as proj:
        app = proj.app
        messages = [app.make_message("faults.record", (i, rng.uniform(5, 25))) for i in range(count)]
        for start in range(0, count, 500):
            app.send_messages(messages[start : start + 500])
        ids = [m.id for m in messages]

        started = time.monotonic()
        workers: list[Worker] = [env.worker("-c", "2", "-l", "info") for _ in range(2)]
        killed_children: set[int] = set()
        killed_supervisors: set[int] = set()
        whole_kills_at = [count * (k + 1) // (WHOLE_WORKER_KILLS + 1) for k in range(WHOLE_WORKER_KILLS)]
        restarts = 0
        kill_every = KILL_EVERY_BY_BROKER.get(env.name, KILL_EVERY)
        next_kill = time.monotonic() + kill_every
        remaining = _Unsettled(app.broker, ids) if env.name == "rabbitmq" else lambda: _remaining(app.broker)
        deadline = started + sized(180, 600)  # a bound, not a target: RabbitMQ drains slowest
        while True:
            waiting, running = remaining()
            if waiting == 0 and running == 0:
                break
            assert time.monotonic() < deadline, f"not drained: {waiting} waiting, {running} running"
            done = count - waiting - running
            if whole_kills_at and done >= whole_kills_at[0]:
                whole_kills_at.pop(0)
                victim = rng.choice([w for w in workers if w.alive()])
                killed_supervisors.add(victim.pid)
                victim.kill()
                workers.remove(victim)
                workers.append(env.worker("-c", "2", "-l", "info"))
                restarts += 1
            if time.monotonic() >= next_kill and waiting:  # kill while there is work to interrupt
                next_kill += kill_every
                children = [pid for w in workers if w.alive() for pid in w.children()]
                if children:
                    pid = rng.choice(children)
                    killed_children.add(pid)
                    with contextlib.suppress(ProcessLookupError):  # it may have just exited
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        drained = time.monotonic() - started

        results = {i: app.broker.get_result(i) for i in ids}
        lost = [i for i, r in results.items() if r is None or r.state != SUCCESS]
        dead = app.broker.list_dead(limit=1000)
        runs = env.executions()
        per_task = Counter(task_id for task_id, _, _ in runs)
        unexplained = Counter(
            task_id
            for task_id, pid, ppid in runs
            if pid not in killed_children and ppid not in killed_supervisors
        )
        extra = sum(n - 1 for n in per_task.values() if n > 1)
        figures = {
            "tasks": count,
            "child_kills": len(killed_children),
            "worker_kills": len(killed_supervisors),
            "restarts": restarts,
            "lost": len(lost),
            "dead_letters": len(dead),
            "extra_executions": extra,
            "tasks_run_twice_or_more": sum(1 for n in per_task.values() if n > 1),
            # tasks of killed children their supervisor found (held_by) and requeued at once
            "requeued_by_supervisor": env.logs().count("requeued: its process was killed"),
            # claims the server committed after their killed child was reaped (Broker.orphaned)
            "orphaned_claims": env.logs().count("before its claim was seen"),
            "drain_seconds": round(drained, 1),
        }
        report("kill storm", env.name, **figures)
        for worker in workers:
            worker.stop()

    states = Counter(None if results[i] is None else results[i].state for i in lost)  # type: ignore[union-attr]
    assert not lost, f"{len(lost)} tasks lost ({dict(states)}), e.g. {lost[:5]}; figures {figures}"
    assert not dead, [(d.id, d.reason) for d in dead[:5]]
    assert set(per_task) == set(ids), "a task completed without a recorded run"
    twice = {task_id: n for task_id, n in unexplained.items() if n > 1}
    assert not twice, f"tasks run more than once outside killed processes: {list(twice.items())[:5]}"
    assert len(killed_supervisors) == WHOLE_WORKER_KILLS
    assert killed_children, "the storm never killed a child"


@pytest.mark.slow
@pytest.mark.parametrize("fault_env", STORM_BROKERS, indirect=True)
def test_claim_a_killed_child_never_reported_is_requeued(fault_env: FaultEnv) -> None:
    """The kill storm's rarest case, made deterministic: a claim recorded in the broker under a
    child's pid that its supervisor never heard of (the child died between the claim's commit
    and its report). The supervisor finds it with ``held_by`` when it reaps the child, as it
    finds the tasks a child doesn't report on brokers that list holders."""
    env = fault_env
    env.conf.update(worker_dead_after=3.0)
    with client(env) as proj:
        app = proj.app
        worker = env.worker("-c", "1")
        busy = proj.block.delay("busy", release="go")  # keeps the only child from claiming
        child_pid = env.wait_marker("started-busy-1")["pid"]
        node = wait_for(
            lambda: next((w.node for w in app.broker.workers() if w.pid == worker.pid), None),
            what="the worker's heartbeat",
        )
        orphan = proj.add.delay(40, 2)
        from potatoq.brokers.base import WorkerRef

        claimed = wait_for(
            lambda: app.broker.claim(["default"], WorkerRef(node, child_pid)), what="the claim"
        )
        assert claimed.id == orphan.id
        env.mark("go")
        os.kill(child_pid, signal.SIGKILL)
        assert orphan.get(timeout=30) == 42
        assert busy.get(timeout=30)
        if reports_every_task(app.broker.capabilities):
            assert f"[{orphan.id}] was claimed by child {child_pid}, which died before reporting it" in (
                worker.output()
            )
        elif app.broker.capabilities.supervisor_settles:  # found with held_by like its unreported tasks
            assert (
                f"[{orphan.id}] requeued: its process was killed by SIGKILL (delivery 1 of" in worker.output()
            )
        assert worker.stop() == 0


@pytest.mark.slow
@pytest.mark.parametrize("fault_env", [*STORM_BROKERS, "valkey"], indirect=True)
def test_claim_committed_after_its_child_was_reaped_is_requeued(fault_env: FaultEnv) -> None:
    """The kill storm's race on a server: a child killed while its claim runs leaves the
    server to finish and commit it, possibly after the supervisor reaped the child and asked
    ``held_by``. The claim then names a dead pid under a node that keeps heartbeating
    (recovery never frees it on the database brokers, which have no leases); the supervisor's
    recovery round finds it with ``orphaned`` (databases) or by asking ``held_by`` again a
    moment after the reap (Redis, Valkey: sooner than the lease) and requeues it. Made
    deterministic: the test writes the claim under the dead pid once the child is reaped."""
    env = fault_env
    # neither recovery by heartbeat age nor an expired lease can be what frees it
    env.conf.update(worker_dead_after=120.0)
    with client(env) as proj:
        app = proj.app
        worker = env.worker("-c", "1")
        busy = proj.block.delay("busy", release="go")
        dead_pid = env.wait_marker("started-busy-1")["pid"]
        node = wait_for(
            lambda: next((w.node for w in app.broker.workers() if w.pid == worker.pid), None),
            what="the worker's heartbeat",
        )
        os.kill(dead_pid, signal.SIGKILL)
        wait_for(lambda: f"child {dead_pid} was killed by SIGKILL" in worker.output(), what="the reap")
        env.wait_marker("started-busy-2")  # the new child runs the requeued task, so claims nothing
        orphan = proj.add.delay(40, 2)
        from potatoq.brokers.base import WorkerRef

        claimed = wait_for(lambda: app.broker.claim(["default"], WorkerRef(node, dead_pid)), what="the claim")
        assert claimed.id == orphan.id
        wait_for(
            lambda: (
                f"[{orphan.id}] was still claimed by process {dead_pid}, which was killed by SIGKILL"
                in worker.output()
            ),
            what="the orphaned claim's requeue",
        )
        env.mark("go")
        assert orphan.get(timeout=30) == 42
        assert busy.get(timeout=30)
        assert worker.stop() == 0
