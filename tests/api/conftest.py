from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from potatoq import Potatoq


@pytest.fixture
def app() -> Iterator[Potatoq]:
    """An app on a private in-memory broker (results stored there too)."""
    application = Potatoq("proj", broker=f"memory://{uuid.uuid4().hex}", result_backend="broker")
    yield application
    application.broker.flush()  # type: ignore[attr-defined]
