"""Security defaults: credentials in broker URLs never reach logs or CLI output; only JSON
and only registered task names are ever run.

Passwords are checked the way an operator would: the worker runs at debug log level with a
URL holding a password, against a live server (a private redis-server with ``requirepass``;
the shared PostgreSQL, whose trust auth ignores the password) and against a port where
nothing listens (connection errors get logged), and ``potatoq migrate`` prints its URL and
its errors. The password must appear nowhere in what they printed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from potatoq.brokers.base import BrokerConfig
from potatoq.utils import mask_url
from tests import services

from . import servers
from .harness import ROOT, FaultEnv, client, free_port, report

SECRET = "pw-S3CRET-never-logged"


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{SECRET}@127.0.0.1:6379/0",
        f"rediss://default:{SECRET}@cache.example:6380/1",
        f"amqp://guest:{SECRET}@127.0.0.1:5672/vhost",
        f"postgresql://app:{SECRET}@db.example/app",
        f"postgresql://db.example/app?user=app&password={SECRET}",
        f"redis://127.0.0.1:6379/0?password={SECRET}",
        f"postgresql://app:with/slash{SECRET}@db.example/app",
        f"redis://app:with@at{SECRET}@cache.example/0",
        f"<Broker 'postgres://app:{SECRET}@db/app'> and amqp://u:{SECRET}@mq//",
    ],
)
def test_mask_url_hides_the_password_in_every_form(url: str) -> None:
    masked = mask_url(url)
    assert SECRET not in masked and "S3CRET" not in masked, masked
    assert "***" in masked


def _cli(env_vars: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "potatoq.cli", "-A", "tests.faults.proj", *args],
        cwd=ROOT,
        env=env_vars,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    userinfo, _, _ = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{userinfo}@127.0.0.1:{port}"))


@pytest.fixture(params=["redis", "postgres"])
def secret_url(request: pytest.FixtureRequest, tmp_path: Path):
    """(broker name, a URL with SECRET as its password that works, transport options)."""
    if request.param == "redis":
        reason = servers.available("redis")
        if reason:
            pytest.fail(reason) if services.IN_CI else pytest.skip(reason)
        server = servers.PrivateRedis(password=SECRET)
        server.start()
        try:
            yield "redis", server.url, {}
        finally:
            server.close()
    else:
        base = urlsplit(services.require("postgres"))
        user = base.username or "postgres"
        url = urlunsplit(base._replace(netloc=f"{user}:{SECRET}@{base.hostname}:{base.port or 5432}"))
        from tests.factories.postgres import drop_schema

        schema = f"pq_secret_{int(time.time() * 1000) % 10**9}"
        try:
            yield "postgres", url, {"schema": schema}
        finally:
            drop_schema(services.url("postgres"), schema)


@pytest.mark.slow
def test_credentials_never_reach_logs_or_cli_output(secret_url, tmp_path: Path) -> None:
    name, url, options = secret_url
    env = FaultEnv(tmp_path, BrokerConfig(url=url, transport_options=options), name)
    printed: list[str] = []
    try:
        with client(env) as proj:
            # a live broker: start, run a task, migrate, stop, all at debug level
            worker = env.worker("-c", "1", "-l", "debug")
            assert proj.add.delay(20, 22).get(timeout=30) == 42
            migrated = _cli(env.environ(), "migrate")
            assert migrated.returncode == 0, migrated.stderr
            assert "***" in migrated.stdout, migrated.stdout
            printed += [migrated.stdout, migrated.stderr]
            assert worker.stop() == 0
            printed.append(worker.output())
            assert repr(proj.app.broker).count("***") == 1
            printed += [repr(proj.app), repr(proj.app.broker)]

        # nothing listens: connection errors are logged and printed, still masked
        dead = _with_port(url, free_port())
        down = {**env.environ(), "POTATOQ_BROKER_URL": dead}
        failed = _cli(down, "-b", dead, "migrate", timeout=90)
        assert failed.returncode == 1
        assert failed.stderr.startswith("potatoq: error: "), failed.stderr  # one clear line
        assert "Traceback" not in failed.stderr, failed.stderr
        printed += [failed.stdout, failed.stderr]
        (tmp_path / "offline").mkdir()
        offline = FaultEnv(tmp_path / "offline", BrokerConfig(url=dead, transport_options=options), name)
        stray = offline.worker("-c", "1", "-l", "debug")
        deadline = time.monotonic() + 20
        while "unreachable" not in stray.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        stray.stop()
        printed.append(stray.output())
        assert "unreachable" in printed[-1], printed[-1][-2000:]
        offline.close()
    finally:
        env.close()

    text = "\n".join(printed)
    leaks = [line for line in text.splitlines() if "S3CRET" in line]
    report(
        "credentials in logs",
        name,
        log_and_cli_lines_checked=len(text.splitlines()),
        lines_with_the_password=len(leaks),
    )
    assert not leaks, leaks[:5]


class _TouchOnUnpickle:
    """Unpickling this creates a file: the proof a worker unpickled a payload."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.touch, (self.path,))


@pytest.mark.slow
@pytest.mark.parametrize("fault_env", ["sqlite"], indirect=True)
def test_a_pickle_payload_is_never_unpickled(fault_env: FaultEnv) -> None:
    """Write access to the broker is not code execution: a pickle is dead-lettered unread."""
    import pickle

    env = fault_env
    proof = env.tmp / "unpickled"
    with client(env, task_serializer="pickle", accept_content=["pickle", "json"]) as proj:
        app = proj.app
        with pytest.raises(TypeError, match="JSON"):  # asking for pickle still sends JSON only
            proj.add.delay(object(), 1)
        bad = env.factory.inject_raw(app.broker, "default", pickle.dumps(_TouchOnUnpickle(proof)))  # type: ignore[attr-defined]
        worker = env.worker("-c", "1")
        assert proj.add.delay(1, 2).get(timeout=30) == 3
        [dead] = app.broker.list_dead()
        assert dead.id == bad and "not valid potatoq JSON" in dead.reason
        assert worker.stop() == 0
    assert not proof.exists(), "a worker unpickled a payload"
    report("pickle payload", env.name, unpickled=False, dead_letter_reason=dead.reason[:90])
