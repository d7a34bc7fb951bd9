"""scripts/services: the probe that tells which server holds a port, and ``up`` reusing servers.

Nothing here starts a server: ``up`` is only pointed at servers that already run (it must reuse
them) or at a port held by the wrong kind of server (it must refuse before starting anything).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests import services

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts" / "services"


def probe(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "probe.py"), url],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def up(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    variables = {k: v for k, v in os.environ.items() if not k.startswith("POTATOQ_TEST_") and k != "CI"}
    return subprocess.run(
        ["bash", str(SCRIPTS / "up"), *args],
        env={**variables, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def replying_server() -> Iterator[list[int | bytes]]:
    """A TCP server on a free port that answers every connection with ``reply`` and closes.

    Yields ``[port, reply]``; the test sets ``reply`` (index 1) before connecting.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)  # so that serve() sees `stop` soon after the test
    state: list[int | bytes] = [listener.getsockname()[1], b""]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(1024)
                reply = state[1]
                assert isinstance(reply, bytes)
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield state
    stop.set()
    thread.join(timeout=10)
    listener.close()


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


def test_probe_says_nothing_listens_on_a_closed_port() -> None:
    port = free_port()
    result = probe(f"redis://127.0.0.1:{port}/0")
    assert result.returncode == 1, result
    assert f"nothing accepts connections on 127.0.0.1:{port}" in result.stderr


def test_probe_refuses_a_server_of_another_protocol(replying_server: list[int | bytes]) -> None:
    replying_server[1] = b"HTTP/1.1 400 Bad Request\r\n"
    result = probe(f"amqp://127.0.0.1:{replying_server[0]}/")
    assert result.returncode == 2, result
    assert f"127.0.0.1:{replying_server[0]}: not AMQP 0-9-1" in result.stderr


def test_probe_names_a_redis_that_refuses_info(replying_server: list[int | bytes]) -> None:
    replying_server[1] = b"-NOAUTH Authentication required.\r\n"
    result = probe(f"redis://127.0.0.1:{replying_server[0]}/0")
    assert result.returncode == 2, result
    assert (
        f"127.0.0.1:{replying_server[0]}: INFO was refused: -NOAUTH Authentication required." in result.stderr
    )


def test_probe_rejects_an_unknown_scheme() -> None:
    result = probe("http://127.0.0.1:1/")
    assert result.returncode != 0
    assert "the scheme must be one of amqp, postgres, postgresql, redis" in result.stderr


@pytest.mark.parametrize(
    ("service", "product", "major"),
    [
        ("postgres", "PostgreSQL", 15),
        ("redis", "Redis", 7),
        ("valkey", "Valkey", 8),
        ("rabbitmq", "RabbitMQ", 4),
    ],
)
def test_probe_names_each_test_server_and_its_version(service: str, product: str, major: int) -> None:
    result = probe(services.require(service))
    assert result.returncode == 0, result
    name, version = result.stdout.split()
    assert name == product
    assert int(version.split(".")[0]) >= major


def test_up_reuses_running_servers_and_exports_their_urls() -> None:
    redis_port = urlsplit(services.require("redis")).port
    valkey_port = urlsplit(services.require("valkey")).port
    result = up(
        "--strict",
        "redis",
        "valkey",
        POTATOQ_REDIS_PORT=str(redis_port),
        POTATOQ_VALKEY_PORT=str(valkey_port),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"export POTATOQ_TEST_REDIS_URL=redis://127.0.0.1:{redis_port}/15",
        f"export POTATOQ_TEST_VALKEY_URL=redis://127.0.0.1:{valkey_port}/0",
    ]
    assert "redis: Redis 7" in result.stderr
    assert "already running" in result.stderr


def test_up_refuses_a_port_held_by_another_kind_of_server() -> None:
    redis_port = urlsplit(services.require("redis")).port
    result = up("--strict", "valkey", POTATOQ_VALKEY_PORT=str(redis_port))
    assert result.returncode == 1
    assert f"the port of redis://127.0.0.1:{redis_port}/0 holds Redis" in result.stderr
    assert "not Valkey >= 8; set POTATOQ_VALKEY_PORT" in result.stderr
    assert result.stdout == ""


def test_up_takes_a_url_already_set_as_it_is() -> None:
    result = up("--strict", "rabbitmq4", POTATOQ_TEST_RABBITMQ_URL="amqp://guest:guest@example.invalid:1/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "export POTATOQ_TEST_RABBITMQ_URL=amqp://guest:guest@example.invalid:1/"
