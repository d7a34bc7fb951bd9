"""Claims that a live process holds in the broker but that none of its threads runs.

A claim can commit while its reply never reaches the process that asked (a network blip,
or an exception after the commit, e.g. in ``settle_and_claim``). The row names a live node
and pid, so neither recovery (dead nodes) nor the orphan sweep (dead pids) frees it, and a
broker without leases has nothing else that would. The supervisor (and the solo worker)
compare the claims the broker lists with what their threads run, every recovery round; a
claim that stays unrun for the grace period (``worker_dead_after``; a thread records what
it claimed within moments) goes back to the queue, uncounted: it never ran.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from potatoq.brokers.base import Delivery, Outcome, Requeue

from .settling import describe

__all__ = ["UnrunClaims"]

logger = logging.getLogger("potatoq.worker.supervisor")


class UnrunClaims:
    """Remembers since when each listed claim has been seen unrun; requeues the overdue."""

    def __init__(self, grace: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        self.clock = clock
        self._since: dict[tuple[str, str], float] = {}  # (task id, token) -> first seen unrun

    def requeue(
        self,
        claims: Iterable[Delivery],
        running: set[tuple[str, str]],
        settle: Callable[[Delivery, Outcome], None],
    ) -> None:
        """Settle with ``Requeue(crashed=False)`` every claim in ``claims`` (what the broker
        lists for the live processes) that is not in ``running`` (their threads' tasks) and
        was not either in the rounds of the last ``grace`` seconds."""
        now = self.clock()
        unrun: dict[tuple[str, str], float] = {}
        for delivery in claims:
            key = (delivery.id, delivery.token)
            if key in running:
                continue
            since = self._since.get(key, now)
            if now - since < self.grace:
                unrun[key] = since
                continue
            logger.warning(
                "%s was claimed by process %d, which hasn't run it for %.0fs (the claim's reply "
                "was lost); requeued",
                describe(delivery),
                delivery.worker.pid,
                now - since,
            )
            settle(delivery, Requeue(crashed=False))
        self._since = unrun
