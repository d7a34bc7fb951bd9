"""The PostgreSQL broker's result store: one row per task in ``potatoq_results``, or a
separate result backend when the app names one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from potatoq.states import READY_STATES

from ..base import (
    Broker,
    ResultRecord,
)
from ..records import fenced_payload


class PostgresResults(Broker):
    """Results in ``potatoq_results`` (mixed into :class:`PostgresBroker`)."""

    if TYPE_CHECKING:
        _result_backend: Broker | None
        _expires: float

        def _run(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]: ...

    # -- results ------------------------------------------------------------------------------

    def store_result(self, record: ResultRecord) -> None:
        if self._result_backend is not None:
            self._result_backend.store_result(record)
            return
        self._run(
            "result_store",
            {
                "task_id": record.task_id,
                "state": record.state,
                "record": record.encode(),
                "result_expires": self._expires,
            },
        )

    def store_result_fenced(self, record: ResultRecord, fence: int, *, keep_ready: bool = False) -> bool:
        if self._result_backend is not None:
            return self._result_backend.store_result_fenced(record, fence, keep_ready=keep_ready)
        written = self._run(
            "result_store_fenced",
            {
                "task_id": record.task_id,
                "state": record.state,
                "record": fenced_payload(record, fence),
                "result_expires": self._expires,
                "fence": int(fence),
                "keep_ready": keep_ready,
                "ready": sorted(READY_STATES),
            },
        )
        return bool(written)

    def get_result(self, task_id: str) -> ResultRecord | None:
        if self._result_backend is not None:
            return self._result_backend.get_result(task_id)
        rows = self._run("result_get", {"task_id": task_id})
        return ResultRecord.decode(bytes(rows[0][0])) if rows else None

    def wait_for_result(self, task_id: str, timeout: float | None) -> ResultRecord | None:
        if self._result_backend is not None:
            return self._result_backend.wait_for_result(task_id, timeout)
        return super().wait_for_result(task_id, timeout)

    def forget_result(self, task_id: str) -> None:
        if self._result_backend is not None:
            self._result_backend.forget_result(task_id)
            return
        self._run("result_forget", {"task_id": task_id})
