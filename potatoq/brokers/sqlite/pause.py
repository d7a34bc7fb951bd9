"""Pausing queues on the SQLite broker: rows of ``potatoq_paused`` (``sql/pause.sql``)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..base import Broker, validate_queue_name
from .setup import SQL


class SQLitePause(Broker):
    """``pause_queue`` / ``resume_queue`` / ``paused_queues`` (mixed into :class:`SQLiteBroker`)."""

    if TYPE_CHECKING:
        clock: Callable[[], float]

        def _read(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]: ...
        def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

    def pause_queue(self, queue: str) -> bool:
        validate_queue_name(queue)
        with self._write() as conn:
            return conn.execute(SQL["pause_add"], {"queue": queue, "since": self.clock()}).rowcount == 1

    def resume_queue(self, queue: str) -> bool:
        validate_queue_name(queue)
        with self._write() as conn:
            return conn.execute(SQL["pause_remove"], {"queue": queue}).rowcount == 1

    def paused_queues(self) -> dict[str, float]:
        return {str(queue): float(since) for queue, since in self._read("pause_list")}
