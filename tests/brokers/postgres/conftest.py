"""Fixtures of the PostgreSQL broker tests: the server URL and brokers on a fresh schema."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig
from potatoq.brokers.postgres import PostgresBroker
from tests import services
from tests.factories.postgres import drop_schema

Make = Callable[..., PostgresBroker]


@pytest.fixture
def pg_url() -> str:
    return services.require("postgres")


@pytest.fixture
def make(pg_url: str) -> Iterator[Make]:
    """Brokers on one fresh schema per test; ``make(**transport_options)``."""
    schema = f"pq_{uuid.uuid4().hex[:12]}"
    made: list[PostgresBroker] = []
    schemas = {schema}

    def factory(config: dict[str, Any] | None = None, **options: Any) -> PostgresBroker:
        options.setdefault("schema", schema)
        schemas.add(options["schema"])
        broker = create_broker(BrokerConfig(url=pg_url, transport_options=options, **(config or {})))
        assert isinstance(broker, PostgresBroker)
        made.append(broker)
        return broker

    yield factory
    for broker in made:
        broker.close()
    for name in schemas:
        drop_schema(pg_url, name)
