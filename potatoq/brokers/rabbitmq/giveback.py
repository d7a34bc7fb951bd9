"""Deliveries handed back uncounted, a part of :class:`~.consume.Intake`: what a process
was pushed but will not run soon (every thread busy for ``hold`` seconds, with a prefetch
above 1) or at all (a graceful shutdown) is published again at the tail of its queue and
acked. A nack, or the connection closing, would count a delivery against it on RabbitMQ
4.0; a re-publish carries the count so far in a header instead (``H_PRIOR``)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from potatoq.brokers.rabbitmq.ops import Op, Publish
from potatoq.brokers.rabbitmq.session import Outgoing, properties_for
from potatoq.brokers.rabbitmq.topology import H_PRIOR

if TYPE_CHECKING:
    from potatoq.brokers.rabbitmq.acks import AckGroup
    from potatoq.brokers.rabbitmq.consume import Pending
    from potatoq.brokers.rabbitmq.io import AmqpLink
    from potatoq.brokers.rabbitmq.session import Session


class GiveBack:
    """``hand_back_stale`` and the give-back at shutdown (mixed into ``Intake``)."""

    if TYPE_CHECKING:
        session: Session
        link: AmqpLink
        cond: threading.Condition
        acks: AckGroup
        hold: float
        _buffer: list[Pending]
        _waiting: int
        _draining: bool
        _handing_back: bool
        _giving_back: list[int]

        def _pause(self) -> None: ...

    def _again(self, pending: Pending, forget: int = 0) -> Outgoing:
        """The same message published again, its delivery count so far in a header."""
        headers = {H_PRIOR: max(0, pending.delivery_count - forget)}
        again = Publish(
            "",
            pending.amqp_queue,
            pending.body,
            properties_for(getattr(pending.properties, "message_id", None) or "", headers),
        )
        return Outgoing(again, pending.queue, delayed=False)

    def hand_back_stale(self) -> None:
        """I/O thread, at every tick: with a prefetch above 1, a delivery that has waited
        here ``hold`` seconds while no thread of this process was free (they all run tasks,
        a long one among them) is given back, re-published at the tail of its queue and
        acked, uncounted, so an idle worker elsewhere runs it instead; the consumers are
        paused until a thread settles (as when the process is full). A crash would
        otherwise count a delivery against it, and a long task would hold it back."""
        if self.link.prefetch <= 1 or self._draining or self._handing_back or self.link.work is None:
            return
        with self.cond:
            if self._waiting or not self._buffer:
                return
            oldest = min(p.pushed_at for p in self._buffer)
        if time.monotonic() - oldest < self.hold:
            return
        self._handing_back = True
        self.link.spawn(self._hand_back_op())

    def _hand_back_op(self) -> Op[None]:
        try:
            yield from self._give_back()
        finally:
            self._handing_back = False

    def _give_back(self) -> Op[None]:
        """Shutdown: pause the consumers and hand back what they pushed that never ran,
        published again and acked, so it doesn't count as a delivery (a nack or the
        connection closing would count on RabbitMQ 4.0)."""
        self.acks.flush()
        self._pause()
        work = self.link.work
        if work is None:
            return
        yield self.link.verify()  # after the cancel-oks: every raced delivery is here
        with self.cond:
            unrun, self._buffer = self._buffer, []
        if not unrun:
            return
        # Still open while published again: no grouped ack may cover them meanwhile.
        self._giving_back = [p.tag for p in unrun if p.generation == self.link.generation]
        try:
            yield from self.session.publish_all([self._again(p) for p in unrun])
            self.acks.flush()  # made meanwhile: sent while these still count as open
        finally:
            self._giving_back = []
        for p in unrun:
            if p.generation == self.link.generation and work.is_open:
                work.basic_ack(p.tag)
