"""Where the real test services are, and what happens when one can't be reached.

A test that needs a service calls :func:`require`. Outside CI an unreachable service skips
the test and is listed loudly at the end of the run; under ``CI=true`` it fails the test.
Under ``make test-fast`` (``POTATOQ_TEST_SERVERLESS=1``) it skips the test whatever the
service's state: that run is the tests that need no server.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

import pytest

DEFAULTS = {
    "postgres": ("POTATOQ_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/test"),
    "redis": ("POTATOQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"),
    "valkey": ("POTATOQ_TEST_VALKEY_URL", "redis://127.0.0.1:6380/0"),
    "rabbitmq": ("POTATOQ_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5673/"),
}

UNREACHABLE: dict[str, str] = {}
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
SERVERLESS = os.environ.get("POTATOQ_TEST_SERVERLESS", "") == "1"


def url(service: str) -> str:
    env, default = DEFAULTS[service]
    return os.environ.get(env) or default


def _reachable(target: str) -> str | None:
    parts = urlsplit(target)
    host, port = parts.hostname or "127.0.0.1", parts.port
    if port is None:
        port = {"postgresql": 5432, "redis": 6379, "amqp": 5672}.get(parts.scheme, 0)
    try:
        with socket.create_connection((host, port), timeout=2):
            return None
    except OSError as exc:
        return f"{host}:{port}: {exc}"


def require(service: str) -> str:
    """The service's URL; skip (fail under CI=true) when nothing listens there."""
    if SERVERLESS:
        # A test the collection-time marking missed (it asks for the server in its body):
        # it still stays out of the serverless run instead of failing or reaching a server.
        pytest.skip(f"needs {service}: not part of make test-fast")
    target = url(service)
    problem = UNREACHABLE.get(service) or _reachable(target)
    if problem is None:
        return target
    UNREACHABLE[service] = problem
    message = f"{service} is not reachable ({problem}); set {DEFAULTS[service][0]}"
    if IN_CI:
        pytest.fail(message + " (CI=true: a missing service is a failure)", pytrace=False)
    pytest.skip(message)
    raise AssertionError("unreachable")  # pytest.skip raises
