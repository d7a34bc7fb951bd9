"""What the worker's outcomes leave in task history when no result is stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from potatoq import Potatoq
from potatoq.brokers.base import HistoryQuery
from potatoq.testing import drain


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Potatoq]:
    application = Potatoq("hist", broker=f"sqlite:///{tmp_path / 'b.sqlite3'}", set_as_current=False)
    application.conf.task_ignore_result = True  # nothing stored: history must still know
    yield application
    application.close()


def test_an_expected_failure_and_a_retry_are_recorded_without_stored_results(app: Potatoq) -> None:
    @app.task(name="hist.expected", throws=(KeyError,))
    def expected() -> None:
        raise KeyError("no such user")

    @app.task(name="hist.again", bind=True)
    def again(self: Any) -> str:
        if self.request.retries == 0:
            raise self.retry(exc=ValueError("upstream busy"), countdown=0)
        return "done"

    failed = expected.delay()
    retried = again.delay()
    drain(app)
    assert app.backend is None or app.backend.get_result(failed.id) is None
    [record] = app.broker.history(HistoryQuery(task_id=failed.id)).records
    assert (record.state, record.exc_type, record.exc_message) == ("FAILURE", "KeyError", "'no such user'")
    states = [
        (r.state, r.exc_type, r.retries) for r in app.broker.history(HistoryQuery(task_id=retried.id)).records
    ]
    assert states == [("SUCCESS", None, 1), ("RETRY", "ValueError", 0)]
