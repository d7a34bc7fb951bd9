"""A poison task (one that SIGKILLs whatever process runs it) runs exactly
``task_max_deliveries`` times, then is dead-lettered; the tasks beside it complete.

One worker of two children gets ``POISONS`` ``faults.poison`` tasks among ordinary ones.
Each run of a poison task is on record (``poison.log``: id, pid, delivery count) before it
kills its child. A killed child's task comes back by the broker's own way (its supervisor
requeues it and counts the delivery; on RabbitMQ the quorum queue returns the unacked
message and counts it towards ``x-delivery-limit``); at the limit it is dead-lettered, so
it runs exactly 5 times, never a 6th, and never fewer (no delivery is counted without a run).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from potatoq.states import SUCCESS

from .harness import FaultEnv, client, report, sized, wait_for
from .proj import POISON
from .test_kill_storm import KILL_STORM_BROKERS

POISONS = 3
MAX_DELIVERIES = 5


@pytest.mark.slow
@pytest.mark.parametrize("fault_env", KILL_STORM_BROKERS, indirect=True)
def test_poison_task_runs_exactly_max_deliveries_times(fault_env: FaultEnv) -> None:
    env = fault_env
    env.conf.update(task_max_deliveries=MAX_DELIVERIES, worker_dead_after=3.0)
    ordinary = sized(20, 200)
    with client(env) as proj:
        app = proj.app
        poisons = [proj.poison.delay() for _ in range(POISONS)]
        others = [proj.add.delay(i, 1) for i in range(ordinary)]
        worker = env.worker("-c", "2")
        poison_ids = {p.id for p in poisons}

        def all_dead() -> list[Any] | None:
            dead = app.broker.list_dead(limit=100)
            return dead if poison_ids <= {d.id for d in dead} else None

        dead = wait_for(all_dead, timeout=120, what="every poison task dead-lettered")
        assert [r.get(timeout=60) for r in others] == [i + 1 for i in range(ordinary)]
        log = (env.dir / POISON).read_text().split()
        runs = Counter(log[0::3])
        deliveries = {
            task_id: sorted(int(n) for t, n in zip(log[0::3], log[2::3], strict=True) if t == task_id)
            for task_id in runs
        }
        results = {i: app.broker.get_result(i) for i in poison_ids}
        report(
            "poison",
            env.name,
            poison_tasks=POISONS,
            ordinary_tasks=ordinary,
            runs_each=sorted(runs.values()),
            dead_letters=len([d for d in dead if d.id in poison_ids]),
            ordinary_lost=sum(1 for r in others if app.broker.get_result(r.id).state != SUCCESS),
        )
        assert worker.stop() == 0

    assert set(runs) == poison_ids
    assert all(n == MAX_DELIVERIES for n in runs.values()), runs
    assert all(d == list(range(1, MAX_DELIVERIES + 1)) for d in deliveries.values()), deliveries
    assert all(r is None or r.state != SUCCESS for r in results.values())
