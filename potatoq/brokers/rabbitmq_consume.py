"""Taking deliveries: ``claim()`` and ``wait()`` mapped onto AMQP for one process.

* ``claim(queues)`` is exact, as the contract asks: it first takes a delivery already
  pushed to this process (see ``wait``), else asks each band queue, potatoq queues in the
  order given and bands highest first, how many messages are ready (a passive declare,
  cheap) and takes one with ``basic.get`` from the first that has any.
* ``wait(queues, timeout)`` starts a consumer with prefetch 1 on every band queue of
  ``queues`` and blocks until one pushes a delivery. That delivery is the next claim's.
* While a task runs, the consumers are *paused*: as soon as a claim hands out a delivery
  and no other thread of the process is waiting, every consumer is cancelled, so nothing
  waits in this process's buffer while another worker is idle. A delivery that raced the
  cancel stays in the buffer and is the next claim's (giving it back would count towards
  its delivery limit on RabbitMQ 4.0). ``wait`` starts the consumers again.

Every delivery is fenced with a token naming this process's link and the work channel's
generation (see :class:`~.rabbitmq_io.AmqpLink`): when the channel or connection is
replaced, RabbitMQ has already returned its unacked deliveries to their queues, so a
settle of one of them is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import Sequence
from typing import Any

import pika.channel

from potatoq.brokers.rabbitmq_declare import cancel_keeping
from potatoq.brokers.rabbitmq_io import AmqpLink, ChannelLost, Op, Publish
from potatoq.brokers.rabbitmq_session import Outgoing, Session, properties_for
from potatoq.brokers.rabbitmq_topology import H_PRIOR

_arrival = itertools.count()


@dataclasses.dataclass(slots=True)
class Pending:
    """A delivery received on the work channel and not settled yet."""

    tag: int
    generation: int
    amqp_queue: str
    queue: str  # the potatoq queue
    band: int
    properties: Any
    body: bytes
    redelivered: bool
    seq: int = dataclasses.field(default_factory=lambda: next(_arrival))

    @property
    def delivery_count(self) -> int:
        """Earlier deliveries of this message: RabbitMQ's count (it omits the header on the
        first delivery, 4.0) plus those before a graceful requeue re-published it."""
        headers = getattr(self.properties, "headers", None) or {}
        try:
            return int(headers.get("x-delivery-count") or 0) + int(headers.get(H_PRIOR) or 0)
        except (TypeError, ValueError):
            return 0


class Intake:
    """Consumers, the local buffer and handed-out deliveries of one process."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.link: AmqpLink = session.link
        self.cond = threading.Condition()
        # Guarded by cond (read by waiting threads, written on the I/O thread):
        self._buffer: list[Pending] = []
        self._waiting = 0
        self._interrupted = 0
        # interrupt() count when each thread's last wait() returned: one made since (even
        # before that thread's next wait started) makes the next wait() return at once.
        self._seen = threading.local()
        self._lost = 0  # bumped when the work channel goes away, so waiters wake up
        # I/O thread only:
        self._consumers: dict[str, str] = {}  # amqp queue -> consumer tag
        self._by_tag: dict[str, tuple[str, int, str]] = {}  # consumer tag -> (queue, band, amqp)
        self._handed: dict[int, Pending] = {}  # delivery tag -> delivery (current generation)
        self._wanted: list[tuple[str, int, str]] = []  # what wait() consumes

    # ------------------------------------------------------------------ order of queues

    def _order(self, queues: Sequence[str]) -> list[tuple[str, int, str]]:
        return [
            (queue, band, amqp)
            for queue in queues
            for band, amqp in self.session.topo.bands_high_first(queue)
        ]

    def _pop_buffered(self, order: list[tuple[str, int, str]]) -> Pending | None:
        rank = {amqp: i for i, (_q, _b, amqp) in enumerate(order)}
        with self.cond:
            best: Pending | None = None
            for item in self._buffer:
                if item.amqp_queue in rank and (
                    best is None or (rank[item.amqp_queue], item.seq) < (rank[best.amqp_queue], best.seq)
                ):
                    best = item
            if best is not None:
                self._buffer.remove(best)
            return best

    def _has_buffered(self, queues: Sequence[str]) -> bool:
        wanted = set(queues)
        return any(item.queue in wanted for item in self._buffer)

    # ------------------------------------------------------------------ operations

    def claim_op(self, queues: Sequence[str]) -> Op[Pending | None]:
        for queue in queues:
            yield from self.session.ensure(queue)
        order = self._order(queues)
        pending = self._pop_buffered(order)
        if pending is None:
            try:
                pending = yield from self._get_first(order)
            except ChannelLost:
                # The work channel closed under us (e.g. a queue was deleted): whatever it
                # held is back in its queue. Nothing claimed; the caller tries again.
                self.session.declared.clear()
                return None
        if pending is None:
            return None
        self._handed[pending.tag] = pending
        with self.cond:
            idle_waiters = self._waiting
        if idle_waiters == 0:
            self._pause()
        return pending

    def _get_first(self, order: list[tuple[str, int, str]]) -> Op[Pending | None]:
        """basic.get from the first band queue, in ``order``, that has a ready message.

        With several queues to choose from, their ready counts are asked first, all at once
        (a basic.get on an empty quorum queue costs a Raft round; a passive declare doesn't).
        """
        counts: list[int | None] = [None] * len(order)
        if len(order) > 1:
            counts = yield self.link.ready_counts([amqp for _q, _b, amqp in order])
        for (queue, band, amqp), ready in zip(order, counts, strict=True):
            if ready == 0:
                continue
            got = yield self.link.get(amqp)
            if got is None:
                continue
            method, properties, body = got
            return Pending(
                tag=method.delivery_tag,
                generation=self.link.generation,
                amqp_queue=amqp,
                queue=queue,
                band=band,
                properties=properties,
                body=body,
                redelivered=bool(method.redelivered),
            )
        return None

    def resume_op(self, queues: Sequence[str]) -> Op[None]:
        """Start consumers on every band queue of ``queues`` (those not running yet)."""
        for queue in queues:
            yield from self.session.ensure(queue)
        self._wanted = self._order(queues)
        wanted = {amqp for _q, _b, amqp in self._wanted}
        work = self.link.work
        for amqp in [a for a in self._consumers if a not in wanted]:  # queues no longer asked for
            tag = self._consumers.pop(amqp)
            if work is not None:
                cancel_keeping(work, tag, self._forget_cancelled(tag))
        self._start_consumers()

    def _start_consumers(self) -> None:
        work = self.link.work
        if work is None or not work.is_open:
            return
        for queue, band, amqp in self._wanted:
            if amqp in self._consumers:
                continue
            tag = work.basic_consume(amqp, self._on_message, auto_ack=False)
            self._consumers[amqp] = tag
            self._by_tag[tag] = (queue, band, amqp)

    def _pause(self) -> None:
        work = self.link.work
        consumers, self._consumers = self._consumers, {}
        if work is None:
            return
        for tag in consumers.values():
            cancel_keeping(work, tag, self._forget_cancelled(tag))

    def _forget_cancelled(self, tag: str) -> Any:
        """The cancel-ok callback for ``tag``. pika files every pending cancel callback of a
        channel under one key, so the first cancel-ok may run all of them: each forgets
        the tag the frame names, never its own, so a consumer still live on the server
        keeps its deliveries."""

        def on_cancel_ok(frame: Any) -> None:
            method = getattr(frame, "method", None)
            self._by_tag.pop(getattr(method, "consumer_tag", None) or tag, None)

        return on_cancel_ok

    def _on_message(self, channel: pika.channel.Channel, method: Any, properties: Any, body: bytes) -> None:
        delivering: pika.channel.Channel = channel
        if channel is not self.link.work:
            return
        queue, band, amqp = self._by_tag.get(method.consumer_tag, ("", 0, ""))
        if not amqp:
            # A delivery for a consumer we no longer know: hand it back rather than leave
            # it unacked (it would sit on this channel, never run, until the channel closes).
            delivering.basic_nack(method.delivery_tag, requeue=True)
            return
        pending = Pending(
            tag=method.delivery_tag,
            generation=self.link.generation,
            amqp_queue=amqp,
            queue=queue,
            band=band,
            properties=properties,
            body=body,
            redelivered=bool(method.redelivered),
        )
        with self.cond:
            self._buffer.append(pending)
            self.cond.notify_all()

    def on_work_channel_lost(self) -> None:
        """I/O thread: the work channel is gone; RabbitMQ requeued everything it held."""
        self._consumers.clear()
        self._by_tag.clear()
        self._handed.clear()
        # It may have closed because a queue was deleted: declare again before next use.
        self.session.declared.clear()
        with self.cond:
            self._buffer.clear()
            self._lost += 1
            self.cond.notify_all()

    def on_connected(self) -> None:
        """I/O thread: a new work channel is open; restart consumers if a thread waits."""
        with self.cond:
            waiting = self._waiting
        if waiting and self._wanted:
            self._start_consumers()

    # -- settling

    def owned(self, token: str) -> Pending | None:
        tag = self.link.owns(token)
        return None if tag is None else self._handed.get(tag)

    def is_current_op(self, token: str) -> Op[bool]:
        return self.owned(token) is not None
        yield  # pragma: no cover - makes this a generator

    def settle_op(self, token: str, publishes: Sequence[Outgoing], action: str, forget: int = 0) -> Op[bool]:
        """Publish ``publishes`` (confirmed), then ``action`` the delivery. False, doing
        nothing, if the delivery is stale.

        * "ack": done with it (after its follow-ups, retry or dead letter were published);
        * "requeue": ``basic.nack(requeue)``, back at the head of its queue; counts as a
          delivery, as a crash should;
        * "republish": a graceful requeue. On RabbitMQ 4.0 every nack counts towards the
          delivery limit, so a task interrupted by a few worker restarts would be
          dead-lettered without having failed. Instead the same payload is published again
          (at the tail of its queue) carrying the deliveries so far in a header, then the
          delivery is acked: its count doesn't grow, crash counts before it are kept.
          ``forget`` earlier deliveries are dropped from the count too (the one a worker
          was killed in at shutdown, see ``RabbitMQBroker.prepare_kill``).
        """
        first = self.owned(token)
        if first is None:
            return False
        if action == "republish":
            headers = {H_PRIOR: max(0, first.delivery_count - forget)}
            again = Publish(
                "",
                first.amqp_queue,
                first.body,
                properties_for(getattr(first.properties, "message_id", None) or "", headers),
            )
            publishes = [*publishes, Outgoing(again, first.queue, delayed=False)]
            action = "ack"
        if publishes:
            yield from self.session.publish_all(publishes)
        pending = self.owned(token)
        work = self.link.work
        if pending is None or work is None or not work.is_open:
            return False
        if action == "ack":
            work.basic_ack(pending.tag)
        else:
            work.basic_nack(pending.tag, requeue=True)
        del self._handed[pending.tag]
        # basic.ack has no reply: it only sits in pika's output buffer so far, and a
        # process exiting right after a settle (a recycled worker child uses os._exit)
        # would lose it, so the task would run again. A round trip on the same channel
        # returns once RabbitMQ has processed everything sent before it (a passive declare of
        # a built-in exchange: the cheapest reply RabbitMQ gives).
        try:
            yield self.link.rpc(work.exchange_declare, "amq.direct", passive=True)
        except ChannelLost:
            return False  # the ack may or may not have been processed
        return True

    # ------------------------------------------------------------------ caller side

    def wait(self, queues: Sequence[str], timeout: float) -> None:
        """Block until a delivery for ``queues`` is pushed, ``timeout`` passes or
        :meth:`interrupt` is called."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self.cond:
            interrupted, lost = self._interrupted, self._lost
            if self._has_buffered(queues) or getattr(self._seen, "count", 0) != interrupted:
                self._seen.count = interrupted
                return
            self._waiting += 1
        try:
            with contextlib.suppress(ChannelLost):  # a spurious return; the caller claims
                self.link.run(self.resume_op, list(queues))
            with self.cond:
                self.cond.wait_for(
                    lambda: (
                        self._has_buffered(queues) or self._interrupted != interrupted or self._lost != lost
                    ),
                    max(0.0, deadline - time.monotonic()),
                )
        finally:
            with self.cond:
                self._waiting -= 1
                self._seen.count = self._interrupted

    def interrupt(self) -> None:
        with self.cond:
            self._interrupted += 1
            self.cond.notify_all()
