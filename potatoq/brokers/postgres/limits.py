"""The PostgreSQL broker's concurrency- and rate-limit calls: run-time overrides and usage.
The slot and the token are taken by the claim statement (``sql/jobs.sql``, ``job_claim``);
slots are given back by triggers on ``potatoq_jobs`` (``sql/install/current.sql``), and
tasks of a key without a token are moved aside by ``rate_defer`` (``sql/rates.sql``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..base import Broker, Delivery
from ..limits import (
    HEADER,
    RATE_HEADER,
    LimitUsage,
    RateUsage,
    rate_usage_row,
    usage_row,
    validate_limit,
    validate_rate,
)

if TYPE_CHECKING:
    from .announce import DueAnnouncer
    from .clocks import PromotionClock
    from .wakeups import PerProcess

# Claims run again at once after losing the race for a key's last token to another claim.
TOKEN_RACE_RETRIES = 3


class PostgresLimits(Broker):
    """Concurrency limits in ``potatoq_limits`` (mixed into :class:`PostgresBroker`)."""

    if TYPE_CHECKING:

        def _run(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]: ...

        _rates_seen: bool
        _due: DueAnnouncer
        _promotion: PerProcess[PromotionClock]

    def set_limit(self, key: str, limit: int | None) -> None:
        key, limit = validate_limit(key, limit)
        self._run("limit_set", {"key": key, "concurrency": limit})

    def limits(self) -> list[LimitUsage]:
        return [usage_row(row) for row in self._run("limit_usage")]

    def set_rate(self, key: str, rate: str | float | None, burst: int | None = None) -> None:
        key, per_second, checked = validate_rate(key, rate, burst)
        self._run(
            "rate_set", {"key": key, "rate": per_second, "burst": None if per_second is None else checked}
        )

    def rates(self) -> list[RateUsage]:
        return [rate_usage_row(row[:6], row[6]) for row in self._run("rate_usage")]

    def _rate_defer_in(self, conn: Any, stmts: Any, params: Mapping[str, Any]) -> Any:
        """Queue ``rate_defer`` in the claim's pipeline, once this process has claimed a
        rate-limited task (until then no key it knows of can be without a token, and the
        claim skips those of other processes' keys anyway)."""
        if not self._rates_seen:
            return None
        return conn.execute(stmts["rate_defer"].query, params)

    def _rate_deferred(self, rows: list[tuple[Any, ...]]) -> None:
        """After ``rate_defer``: promote here when the first moved task falls due, and tell
        the queues' idle workers (a 'due' announcement) so they do too."""
        if not rows:
            return
        soonest = min(float(due_in) for _, due_in in rows)
        self._promotion.get().due_within(max(soonest, 0.0))
        self._due.announce_queues([(str(queue), float(due_in)) for queue, due_in in rows])

    def _rate_claimed(self, delivery: Delivery | None) -> None:
        message = delivery.message if delivery is not None else None
        if message is not None and RATE_HEADER in message.headers:
            self._rates_seen = True


def lost_token_race(row: tuple[Any, ...] | None) -> bool:
    """job_claim's row of NULLs: another claim took the key's last token first."""
    return row is not None and row[0] is None


def frees_a_slot(delivery: Delivery) -> list[str]:
    """The queue to wake when settling ``delivery`` gives a concurrency slot back (tasks of
    its key wait there), else nothing: unlimited settles NOTIFY nobody."""
    message = delivery.message
    return [delivery.queue] if message is not None and HEADER in message.headers else []
