"""Pausing queues on the PostgreSQL broker: rows of ``potatoq_paused`` (``sql/pause.sql``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..base import Broker, validate_queue_name


class PostgresPause(Broker):
    """``pause_queue`` / ``resume_queue`` / ``paused_queues`` (mixed into :class:`PostgresBroker`)."""

    if TYPE_CHECKING:

        def _run(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]: ...

    def pause_queue(self, queue: str) -> bool:
        validate_queue_name(queue)
        return bool(self._run("pause_add", {"queue": queue}))

    def resume_queue(self, queue: str) -> bool:
        validate_queue_name(queue)
        return bool(self._run("pause_remove", {"queue": queue}))

    def paused_queues(self) -> dict[str, float]:
        return {str(queue): float(since) for queue, since in self._run("pause_list")}
