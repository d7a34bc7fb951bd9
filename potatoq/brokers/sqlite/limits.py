"""The SQLite broker's concurrency-limit calls: run-time overrides and usage. The limit
itself is enforced by the claim statement (``sql/jobs.sql``, ``job_claim``)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..base import Broker
from ..limits import LimitUsage, usage_row, validate_limit
from .setup import SQL


class SQLiteLimits(Broker):
    """Concurrency limits on the database file (mixed into :class:`SQLiteBroker`)."""

    if TYPE_CHECKING:

        def _read(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]: ...
        def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

    def set_limit(self, key: str, limit: int | None) -> None:
        key, limit = validate_limit(key, limit)
        with self._write() as conn:
            if limit is None:
                conn.execute(SQL["limit_clear"], {"key": key})
            else:
                conn.execute(SQL["limit_set"], {"key": key, "concurrency": limit})
            conn.execute(SQL["limit_unpark"], {"key": key})

    def limits(self) -> list[LimitUsage]:
        return [usage_row(row) for row in self._read("limit_usage")]
