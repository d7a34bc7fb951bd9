"""A claim that fails with a broker error other than "unreachable" doesn't end the child: it
logs the error, backs off, and claims again once the broker can answer. Nor does such an
error end the supervisor when it asks what a dead child held (``held_by``).

The fault is real: the jobs table is renamed away under a running worker, so its claims fail
with PostgreSQL's "relation does not exist" (a programming error, not a connection error);
it is renamed back, and the same child runs the next task.
"""

from __future__ import annotations

import os
import signal

import pytest

from .harness import FaultEnv, client, wait_for


def _rename_jobs(env: FaultEnv, old: str, new: str) -> None:
    import psycopg
    from psycopg import sql

    schema = env.conf["broker_transport_options"]["schema"]
    with psycopg.connect(env.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER TABLE {}.{} RENAME TO {}").format(
                sql.Identifier(schema), sql.Identifier(old), sql.Identifier(new)
            )
        )


@pytest.mark.slow
@pytest.mark.parametrize("fault_env", ["postgres"], indirect=True)
def test_a_claim_failing_with_a_broker_error_does_not_end_the_child(fault_env: FaultEnv) -> None:
    env = fault_env
    with client(env) as proj:
        worker = env.worker("-c", "1")
        assert proj.add.delay(1, 1).get(timeout=30) == 2
        children = worker.children()
        _rename_jobs(env, "potatoq_jobs", "potatoq_jobs_away")
        try:
            wait_for(
                lambda: "claim failed; retrying" in env.logs() or worker.children() != children,
                60,
                "a failed claim",
            )
        finally:
            _rename_jobs(env, "potatoq_jobs_away", "potatoq_jobs")
        assert proj.add.delay(2, 3).get(timeout=60) == 5
        assert worker.alive() and worker.children() == children, "the worker or its child was replaced"
        assert worker.stop() == 0


@pytest.mark.slow
@pytest.mark.parametrize("fault_env", ["postgres"], indirect=True)
def test_held_by_failing_with_a_broker_error_does_not_end_the_supervisor(fault_env: FaultEnv) -> None:
    """A child dies while the broker can't answer what it held: the supervisor logs that,
    starts a new child, and the worker goes on."""
    env = fault_env
    with client(env) as proj:
        worker = env.worker("-c", "1")
        assert proj.add.delay(1, 1).get(timeout=30) == 2
        (child,) = worker.children()
        _rename_jobs(env, "potatoq_jobs", "potatoq_jobs_away")
        try:
            os.kill(child, signal.SIGKILL)
            wait_for(
                lambda: (
                    "could not ask the broker for the unreported tasks" in env.logs() or not worker.alive()
                ),
                60,
                "the supervisor to ask what the dead child held",
            )
        finally:
            _rename_jobs(env, "potatoq_jobs_away", "potatoq_jobs")
        assert worker.alive(), "the supervisor exited"
        assert proj.add.delay(2, 3).get(timeout=60) == 5
        assert worker.stop() == 0
