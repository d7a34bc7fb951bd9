"""Fencing: a worker paused past worker_dead_after can't overwrite the newer delivery's outcome.

Worker A runs a task and is frozen (SIGSTOP on its whole process group, so its heartbeats and
lease extensions stop too). Once A has been silent for ``worker_dead_after``, worker B's
recovery (or the expired lease) makes the task ready again and B runs and completes it. Then
A is resumed (SIGCONT): its child finishes the same task and settles, and the broker refuses
that settle because its fencing token is stale. A logs the refusal, and the stored result
stays B's.
"""

from __future__ import annotations

import signal
import time

import pytest

from .conftest import SHARED_BROKERS
from .harness import FaultEnv, client, report, wait_for

DEAD_AFTER = 2.0
#: How a silent holder is noticed within seconds, per broker: worker_dead_after (heartbeats,
#: leases) everywhere, except that RabbitMQ requeues a holder's messages itself once the
#: AMQP heartbeat of its connection times out, so that heartbeat is made short too.
SILENCE_OPTIONS: dict[str, dict[str, object]] = {"rabbitmq": {"heartbeat": 2}}


@pytest.mark.slow
@pytest.mark.parametrize("fault_env", SHARED_BROKERS, indirect=True)
def test_late_settle_of_a_paused_worker_is_refused(fault_env: FaultEnv) -> None:
    env = fault_env
    env.conf.update(worker_dead_after=DEAD_AFTER, worker_heartbeat_interval=0.3)
    if env.name in SILENCE_OPTIONS:
        env.conf["broker_transport_options"] = {
            **env.conf.get("broker_transport_options", {}),
            **SILENCE_OPTIONS[env.name],
        }
    with client(env) as proj:
        a = env.worker("-c", "1")
        result = proj.block.delay("fenced", release="go")
        first = env.wait_marker("started-fenced-1")
        a.signal_group(signal.SIGSTOP)
        paused = time.monotonic()
        b = env.worker("-c", "1")
        second = env.wait_marker("started-fenced-2", timeout=30)
        redelivered_after = time.monotonic() - paused
        assert second["pid"] != first["pid"]
        env.mark("go")
        assert result.get(timeout=30) == second["pid"]

        a.signal_group(signal.SIGCONT)
        env.wait_marker(f"done-fenced-{first['pid']}")  # A's child ran the task to its end
        refusal = f"settle of faults.block[{result.id}] (Complete) refused: the claim was lost"
        wait_for(lambda: refusal in a.output(), 30, "A to log its refused settle")
        stored = proj.app.backend.get_result(result.id)
        assert stored is not None and stored.state == "SUCCESS", stored
        new_result_kept = stored.result == second["pid"]
        assert a.alive() and b.alive()
        assert proj.add.delay(2, 3).get(timeout=30) == 5  # both keep working
        report(
            "fencing",
            env.name,
            silent_after=(
                f"AMQP heartbeat {SILENCE_OPTIONS[env.name]['heartbeat']} s"
                if env.name in SILENCE_OPTIONS
                else f"worker_dead_after {DEAD_AFTER:g} s"
            ),
            redelivered_after_seconds=round(redelivered_after, 1),
            late_settle_refused=True,
            result_is_new_delivery=new_result_kept,
        )
        assert a.stop() == 0
        assert b.stop() == 0
    assert new_result_kept, f"stored result {stored.result} is the stale delivery's, not {second['pid']}"
