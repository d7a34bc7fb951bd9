"""``revoke(terminate=True)`` stops a running task: the worker that runs it signals its
process (SIGTERM unless ``signal=`` says otherwise) within about a second, kills it after a
grace if it is still alive, records the task as REVOKED and never runs it again.

Each test holds a task running in a one-process worker, revokes it, and checks that the
process running it died, that the task never finished, and that it was not delivered again
(the worker runs a later task first: a redelivered copy would be claimed before it).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from potatoq import states
from potatoq.exceptions import TaskRevokedError
from tests.worker.conftest import ROOT, Env, wait_for


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 - a zombie is dead too
    except OSError:  # reaped between the two looks (ESRCH or ENOENT)
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _check_terminated(env: Env, name: str, result: object, expect_in_log: str) -> None:
    from tests.worker import proj

    pid = env.marker(f"started-{name}")["pid"]
    wait_for(lambda: not _alive(pid), timeout=30, what=f"process {pid} running the task to die")
    with pytest.raises(TaskRevokedError):
        result.get(timeout=30)  # type: ignore[attr-defined]
    # the worker goes on, and a redelivered copy would run before this one
    assert proj.add.delay(2, 3).get(timeout=30) == 5
    env.mark(f"go-{name}")
    assert env.marker(f"done-{name}") is None, "the revoked task ran to its end"
    assert env.marker(f"started-{name}")["delivery"] == 1, "the revoked task was delivered again"
    assert result.state == states.REVOKED  # type: ignore[attr-defined]
    if proj.app.broker.capabilities.finds_queued:
        wait_for(lambda: proj.app.broker.queued_task(result.id) is None, what="the task to leave the broker")  # type: ignore[attr-defined]
    wait_for(lambda: expect_in_log in env.workers[0].output(), what=f"{expect_in_log!r} in the worker log")


def _terminate_running_task(env: Env) -> None:
    from tests.worker import proj

    env.worker("-c", "1")
    result = proj.block.delay("victim", release="go-victim")
    env.wait_marker("started-victim")
    result.revoke(terminate=True)
    _check_terminated(env, "victim", result, "was killed by SIGTERM")


def test_revoke_terminate_stops_a_running_task(env: Env, client: object) -> None:
    _terminate_running_task(env)


@pytest.mark.parametrize("broker_env", ["postgres", "redis", "rabbitmq"], indirect=True)
def test_revoke_terminate_on_other_brokers(broker_env: Env, broker_client: object) -> None:
    _terminate_running_task(broker_env)


def test_control_revoke_with_a_signal(env: Env, client: object) -> None:
    from tests.worker import proj

    env.worker("-c", "1")
    result = proj.block.delay("killed", release="go-killed")
    env.wait_marker("started-killed")
    proj.app.control.revoke(result.id, terminate=True, signal="SIGKILL")
    _check_terminated(env, "killed", result, "was killed by SIGKILL")


def test_a_task_that_ignores_sigterm_is_killed_after_the_grace(env: Env, client: object) -> None:
    from tests.worker import proj

    env.worker("-c", "1")
    result = proj.stubborn.delay("stubborn")
    env.wait_marker("started-stubborn")
    result.revoke(terminate=True)
    _check_terminated(env, "stubborn", result, "still alive 5s after its terminate signal")
    assert "its process was killed by SIGKILL" in env.workers[0].output()


def test_potatoq_revoke_terminate_command(env: Env, client: object) -> None:
    from tests.worker import proj

    env.worker("-c", "1")
    result = proj.block.delay("cli", release="go-cli")
    env.wait_marker("started-cli")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "potatoq.cli",
            "-A",
            "tests.worker.proj",
            "revoke",
            "--terminate",
            "-s",
            "KILL",
            result.id,
        ],
        cwd=ROOT,
        env=env.vars,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"terminating {result.id}" in done.stdout
    _check_terminated(env, "cli", result, "was killed by SIGKILL")


def test_revoke_terminate_rejects_an_unknown_signal(client: object) -> None:
    from tests.worker import proj

    with pytest.raises(ValueError, match="unknown signal 'SIGNOPE'"):
        proj.app.control.revoke("some-id", terminate=True, signal="SIGNOPE")
