"""The SQLite broker's concurrency- and rate-limit calls: run-time overrides and usage. The
limits themselves are enforced in the claim (``sql/jobs.sql``, ``job_claim``; ``sql/rates.sql``)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..base import Broker
from ..limits import LimitUsage, RateUsage, rate_usage_row, usage_row, validate_limit, validate_rate
from .setup import SQL


class SQLiteLimits(Broker):
    """Concurrency limits on the database file (mixed into :class:`SQLiteBroker`)."""

    if TYPE_CHECKING:

        def _read(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]: ...
        def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...
        def clock(self) -> float: ...

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

    def set_rate(self, key: str, rate: str | float | None, burst: int | None = None) -> None:
        key, per_second, checked = validate_rate(key, rate, burst)
        now = self.clock()
        with self._write() as conn:
            conn.execute(
                SQL["rate_set"],
                {"key": key, "rate": per_second, "burst": None if per_second is None else checked},
            )
            conn.execute(SQL["rate_unwait"], {"key": key, "now": now})

    def rates(self) -> list[RateUsage]:
        now = self.clock()
        return [rate_usage_row(row, now) for row in self._read("rate_usage", {"now": now})]
