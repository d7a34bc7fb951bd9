"""Fixtures of the Redis / Valkey broker tests: every test runs on both servers, each
under its own key prefix."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.redis import RedisBroker
from tests import services
from tests.conftest import FactoryContext
from tests.factories import redis as redis_factory
from tests.factories import valkey as valkey_factory

FACTORIES = {"redis": redis_factory, "valkey": valkey_factory}


@pytest.fixture(params=sorted(FACTORIES))
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., RedisBroker]]:
    """Makes RedisBrokers sharing one fresh key prefix; ``make(dead_after=...)`` overrides config."""
    module = FACTORIES[request.param]
    services.require(module.SERVICE)
    ctx = FactoryContext(tmp_path=tmp_path, unique=f"t{uuid.uuid4().hex[:10]}", overrides={})
    base = module.make_config(ctx)
    made: list[RedisBroker] = []

    def factory(**overrides: Any) -> RedisBroker:
        broker = create_broker(dataclasses.replace(base, **overrides))
        assert isinstance(broker, RedisBroker)
        made.append(broker)
        return broker

    yield factory
    for broker in made:
        broker.close()
    for fn in reversed(ctx.finalizers):
        fn()


@pytest.fixture
def broker(make: Callable[..., RedisBroker]) -> RedisBroker:
    return make()
