"""'due' announcements of the PostgreSQL broker: telling idle workers that a task scheduled
just now falls due before their next timed promotion.

An idle worker sleeps until the earliest due time it learnt from its last promotion (see
``clocks.PromotionClock``), so a task scheduled after that promotion, due sooner than the
next one, must be announced: one NOTIFY with the payload ``wakeups.DUE_PAYLOAD`` on its
queue, on which listening processes promote at once and so learn its due time. Tasks due
later are found by that timed promotion and announce nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from ...message import Message
from .options import PostgresOptions
from .wakeups import DUE_PAYLOAD, NotifyDebouncer, PerProcess


class DueAnnouncer:
    """Sends 'due' NOTIFYs after commits, debounced per channel by a token bucket of its own
    (so announcing due times never delays a ready task's NOTIFY)."""

    def __init__(
        self,
        options: PostgresOptions,
        channel: Callable[[str], str],
        run: Callable[[str, dict[str, Any]], object],
    ) -> None:
        self._enabled = options.notify  # notify=False: workers poll, nobody listens
        self._horizon = options.poll_interval  # the longest time between timed promotions
        self._channel = channel
        self._run = run  # runs a named statement (the broker's _run)
        self._bucket = PerProcess(
            lambda: NotifyDebouncer(options.notify_debounce, self._send, burst=options.notify_burst)
        )

    def _send(self, channels: list[str]) -> None:
        self._run("notify_channels", {"channels": channels, "payload": DUE_PAYLOAD})

    def channels(self, messages: Iterable[Message]) -> list[str]:
        """The channels of the queues with a task in ``messages`` due before the horizon."""
        if not self._enabled:
            return []
        now = time.time()
        queues = {m.queue for m in messages if m.eta is not None and now < m.eta <= now + self._horizon}
        return [self._channel(q) for q in sorted(queues)]

    def announce(self, messages: Iterable[Message]) -> None:
        """After the statement that scheduled ``messages`` committed (sent by the bucket's
        thread: a NOTIFY that overtook the commit would find nothing to learn)."""
        channels = self.channels(messages)
        if channels:
            self._bucket.get().defer(channels)

    def announce_queues(self, due_in: Iterable[tuple[str, float]]) -> None:
        """Tasks of these queues fall due in so many seconds (moved aside to wait for a rate
        token by a claim that committed)."""
        if not self._enabled:
            return
        channels = sorted({self._channel(q) for q, seconds in due_in if seconds <= self._horizon})
        if channels:
            self._bucket.get().defer(channels)

    def close(self) -> None:
        bucket = self._bucket.pop()
        if bucket is not None:
            bucket.close()  # sends pending announcements first
