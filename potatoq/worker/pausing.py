"""A worker's view of its paused queues (``potatoq queues pause NAME``).

The paused set is stored in the broker; each child re-reads it at most every
``PAUSE_REFRESH`` seconds, just before a claim, and leaves paused queues out of the queues
it claims from. So a pause takes effect fleet-wide within about that long, without touching
the brokers' claim code, and tasks already running are not affected: they finish and settle
as usual. When the set changes, the broker is told (``consume_only``) so that brokers which
push deliveries (RabbitMQ) cancel their consumers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

logger = logging.getLogger("potatoq.worker")

#: Longest time a child claims with a stale view of the paused queues (seconds).
PAUSE_REFRESH = 0.5


class PauseGate:
    """Filters a child's queues by the paused set, re-read from the broker when stale."""

    def __init__(
        self,
        broker: Callable[[], Any],
        queues: Sequence[str] | None,
        *,
        refresh: float = PAUSE_REFRESH,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._broker = broker  # a callable: the app's broker may be replaced after a fork
        # None: any queue (an in-process ThreadWorker, whose queues change as tasks arrive)
        self._queues = None if queues is None else frozenset(queues)
        self.refresh = refresh
        self._clock = clock
        self._lock = threading.Lock()
        self._paused: frozenset[str] = frozenset()
        self._read_at = float("-inf")

    def claimable(self, queues: Sequence[str], *, fresh: bool = False) -> tuple[str, ...]:
        """``queues`` without the paused ones, in the order given (maybe empty); ``fresh``
        re-reads the paused set however recently it was read (before a long idle block)."""
        paused = self._current(fresh)
        if not paused:
            return tuple(queues)
        return tuple(queue for queue in queues if queue not in paused)

    def _current(self, fresh: bool = False) -> frozenset[str]:
        if not fresh and self._clock() - self._read_at < self.refresh:
            return self._paused
        with self._lock:
            now = self._clock()
            if not fresh and now - self._read_at < self.refresh:
                return self._paused
            self._read_at = now
            broker = self._broker()
            try:
                paused = frozenset(broker.paused_queues())
                if self._queues is not None:
                    paused &= self._queues
            except broker.connection_errors as exc:
                # Keep the last known set: the claim that follows reports an outage anyway.
                logger.debug("can't read the paused queues (%r); keeping the last known set", exc)
                return self._paused
            if paused != self._paused:
                self._changed(broker, self._paused, paused)
                self._paused = paused
            return paused

    def _changed(self, broker: Any, before: frozenset[str], after: frozenset[str]) -> None:
        if after - before:
            logger.info("queue(s) paused, not claiming from them: %s", ", ".join(sorted(after - before)))
        if before - after:
            logger.info("queue(s) resumed: %s", ", ".join(sorted(before - after)))
        if self._queues is None:
            return  # no fixed set of queues to consume: claims leave the paused ones out
        try:
            broker.consume_only(sorted(self._queues - after))
        except Exception:
            logger.warning("can't stop consuming from the paused queues", exc_info=True)
