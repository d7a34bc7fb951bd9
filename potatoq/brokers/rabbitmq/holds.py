"""Deliveries held in the process for their rate token (:mod:`.limits`), a part of
:class:`~.consume.Intake`: a task whose token is due within the second waits here, unacked
and without a thread, and since it fills a prefetch slot without running, a claim takes
one more delivery beside it with ``basic.get`` rather than idle until the token is due."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from potatoq.brokers.rabbitmq.ops import ChannelLost, Op

if TYPE_CHECKING:
    from potatoq.brokers.rabbitmq.consume import Pending
    from potatoq.brokers.rabbitmq.io import AmqpLink
    from potatoq.brokers.rabbitmq.session import Session


class RateHolds:
    """``hold_op`` and the claim beside held deliveries (mixed into ``Intake``)."""

    if TYPE_CHECKING:
        session: Session
        link: AmqpLink
        cond: threading.Condition
        _buffer: list[Pending]
        _handed: dict[int, Pending]
        _held: set[int]
        _draining: bool

        def _pop_buffered(self, queues: Sequence[str]) -> Pending | None: ...
        def _order(self, queues: Sequence[str]) -> list[tuple[str, int, str]]: ...
        def _get_first(self, order: list[tuple[str, int, str]]) -> Op[Pending | None]: ...
        def _hand_out(self, pending: Pending) -> Pending: ...

    def hold_op(self, pending: Pending, seconds: float) -> Op[None]:
        """Keep a handed-out delivery here, unacked and unclaimable, for ``seconds`` (less
        than the delay cascade's one-second step: a task whose rate token is due within
        it, see :mod:`.limits`), then put it back in the buffer for the next claim. No
        thread is taken meanwhile; the delivery does fill a prefetch slot. A channel lost
        meanwhile returns it to its queue like any other."""
        generation = pending.generation
        self._held.add(pending.tag)  # not a running task: no reason to pause the consumers

        def back() -> None:
            self._held.discard(pending.tag)
            if generation != self.link.generation or self._handed.pop(pending.tag, None) is None:
                return
            pending.pushed_at = time.monotonic()
            with self.cond:
                self._buffer.append(pending)
                self.cond.notify_all()

        self.link.call_later(max(0.0, seconds), back)
        yield from ()

    def holding(self) -> bool:
        """Any thread: whether deliveries wait here for their rate token (``hold_op``)."""
        return bool(self._held)

    def beside_held_op(self, queues: Sequence[str]) -> Op[Pending | None]:
        """A claim while deliveries waiting for their rate token (``hold_op``) fill the
        consumers' prefetch, so nothing more is pushed: one ``basic.get`` (which no prefetch
        limits) when fewer deliveries than the prefetch are running, so the thread runs
        another task meanwhile instead of idling until the token is due. Holds follow a
        rate's tokens, so this takes at most one more delivery per hold. None when nothing
        is ready or every slot runs a task."""
        if not self._held or self._draining:
            return None
        if len(self._handed) - len(self._held) >= self.link.prefetch:
            return None
        for queue in queues:
            yield from self.session.ensure(queue)
        pending = self._pop_buffered(queues)
        if pending is None:
            try:
                pending = yield from self._get_first(self._order(queues))
            except ChannelLost:  # as in claim_op: what the channel held is back in its queue
                self.session.declared.clear()
                return None
        if pending is None:
            return None
        return self._hand_out(pending)
