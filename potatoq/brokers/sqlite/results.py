"""The SQLite broker's result store: one row per task in ``potatoq_results``, or a separate
result backend when the app names one; a waiter re-reads when ``data_version`` moves."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from potatoq.states import READY_STATES

from ..base import (
    Broker,
    ResultRecord,
)
from ..records import fenced_payload
from .connection import WAIT_MAX, WAIT_MIN, ThreadConnection
from .setup import (
    SQL,
)


class SQLiteResults(Broker):
    """Results in ``potatoq_results`` (mixed into :class:`SQLiteBroker`)."""

    if TYPE_CHECKING:
        clock: Callable[[], float]
        _result_backend: Broker | None

        def _read(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]: ...
        def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...
        def _conn(self) -> ThreadConnection: ...
        def _expiry(self, now: float) -> float | None: ...
        def _result_in(self, conn: sqlite3.Connection, record: ResultRecord | None, now: float) -> None: ...

    # -- results ------------------------------------------------------------------------------

    def store_result(self, record: ResultRecord) -> None:
        if self._result_backend is not None:
            self._result_backend.store_result(record)
            return
        now = self.clock()
        with self._write() as conn:
            self._result_in(conn, record, now)

    def store_result_fenced(self, record: ResultRecord, fence: int, *, keep_ready: bool = False) -> bool:
        if self._result_backend is not None:
            return self._result_backend.store_result_fenced(record, fence, keep_ready=keep_ready)
        now = self.clock()
        with self._write() as conn:
            cursor = conn.execute(
                SQL["result_upsert_fenced"],
                {
                    "task_id": record.task_id,
                    "state": record.state,
                    "payload": fenced_payload(record, fence),
                    "expires_at": self._expiry(now),
                    "now": now,
                    "fence": int(fence),
                    "keep_ready": keep_ready,
                    "ready": json.dumps(sorted(READY_STATES)),
                },
            )
            return cursor.rowcount == 1

    def get_result(self, task_id: str) -> ResultRecord | None:
        if self._result_backend is not None:
            return self._result_backend.get_result(task_id)
        rows = self._read("result_get", {"task_id": task_id, "now": self.clock()})
        return ResultRecord.decode(rows[0][0]) if rows else None

    def wait_for_result(self, task_id: str, timeout: float | None) -> ResultRecord | None:
        """Re-read the result when data_version says something was committed (2 → 50 ms backoff)."""
        if self._result_backend is not None:
            return self._result_backend.wait_for_result(task_id, timeout)
        from potatoq.states import READY_STATES

        local = self._conn()
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = WAIT_MIN
        while True:
            version = local.data_version()
            record = self.get_result(task_id)
            if record is not None and record.state in READY_STATES:
                return record
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return record
                time.sleep(delay if remaining is None else min(delay, remaining))
                if local.data_version() != version:
                    delay = WAIT_MIN  # something was committed: look, and poll fast again
                    break
                delay = min(delay * 2, WAIT_MAX)

    def forget_result(self, task_id: str) -> None:
        if self._result_backend is not None:
            self._result_backend.forget_result(task_id)
            return
        with self._write() as conn:
            conn.execute(SQL["result_delete"], {"task_id": task_id})
