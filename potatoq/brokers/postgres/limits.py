"""The PostgreSQL broker's concurrency-limit calls: run-time overrides and usage. The slot
is taken by the claim statement (``sql/jobs.sql``, ``job_claim``) and given back by
triggers on ``potatoq_jobs`` (``sql/install/current.sql``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..base import Broker, Delivery
from ..limits import HEADER, LimitUsage, usage_row, validate_limit


class PostgresLimits(Broker):
    """Concurrency limits in ``potatoq_limits`` (mixed into :class:`PostgresBroker`)."""

    if TYPE_CHECKING:

        def _run(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]: ...

    def set_limit(self, key: str, limit: int | None) -> None:
        key, limit = validate_limit(key, limit)
        self._run("limit_set", {"key": key, "concurrency": limit})

    def limits(self) -> list[LimitUsage]:
        return [usage_row(row) for row in self._run("limit_usage")]


def frees_a_slot(delivery: Delivery) -> list[str]:
    """The queue to wake when settling ``delivery`` gives a concurrency slot back (tasks of
    its key wait there), else nothing: unlimited settles NOTIFY nobody."""
    message = delivery.message
    return [delivery.queue] if message is not None and HEADER in message.headers else []
