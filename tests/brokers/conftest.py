"""Fixtures shared by the broker-level tests of this folder."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests import services
from tests.factories.postgres import drop_schema


@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    """(PostgreSQL URL, a fresh schema name), the schema dropped afterwards."""
    url = services.require("postgres")
    schema = f"pq_{uuid.uuid4().hex[:12]}"
    yield url, schema
    drop_schema(url, schema)
