"""The SQLite broker's concurrency- and rate-limit calls: run-time overrides and usage. The
limits themselves are enforced in the claim (``sql/jobs.sql``, ``job_claim``; ``sql/rates.sql``
through :func:`rate_defer_in` and :func:`rate_take_in`)."""

from __future__ import annotations

import contextlib
import json
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


def rate_defer_in(conn: sqlite3.Connection, queues: str, now: float) -> None:
    """In the claim's write transaction, before ``job_claim``: the ready tasks of ``queues``
    (a JSON list) whose key has no token now are scheduled for their tokens' times, and
    their keys remember where the next one goes."""
    if conn.execute(SQL["rate_any_waiting"], {"now": now}).fetchone() is None:
        return  # every key has a token (or there is none): nothing to move
    waiting = conn.execute(SQL["rate_defer"], {"queues": queues, "now": now}).fetchall()
    if waiting:
        keys = json.dumps(sorted({key for (key,) in waiting}))
        conn.execute(SQL["rate_defer_mark"], {"keys": keys})


def rate_take_in(conn: sqlite3.Connection, key: str, interval: float, burst: int, now: float) -> None:
    """... and after it: the claimed task takes a token of its rate key."""
    conn.execute(SQL["rate_take"], {"key": key, "now": now, "interval": interval, "burst": burst})
