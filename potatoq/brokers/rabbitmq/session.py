"""One process's use of RabbitMQ: its link, which queues it declared, and confirmed publishing."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import pika

from potatoq.brokers.rabbitmq import declare, delay
from potatoq.brokers.rabbitmq.io import AmqpLink
from potatoq.brokers.rabbitmq.ops import ChannelLost, Op, Publish
from potatoq.brokers.rabbitmq.topology import H_ONCE, Topology
from potatoq.exceptions import OperationalError
from potatoq.message import Message

log = logging.getLogger("potatoq.brokers.rabbitmq")

#: How often a batch is re-published after messages came back unroutable or the publish
#: channel was lost, before the enqueue fails.
PUBLISH_ATTEMPTS = 4


class Outgoing:
    """A message to publish and the potatoq queue it is for (declared if unroutable)."""

    __slots__ = ("delayed", "publish", "queue")

    def __init__(self, publish: Publish, queue: str, delayed: bool) -> None:
        self.publish = publish
        self.queue = queue
        self.delayed = delayed


def properties_for(
    message_id: str | None, headers: Mapping[str, object] | None = None
) -> pika.BasicProperties:
    """Fresh properties: never copied from a delivery, so ``x-death`` and the other
    dead-lettering headers of a message that went through the cascade are never
    re-published (RabbitMQ 3.x would drop such a message as a dead-letter cycle)."""
    return pika.BasicProperties(
        delivery_mode=2,
        message_id=message_id or None,
        content_type="application/json",
        headers=dict(headers) if headers else None,
    )


class Session:
    """Per-process state shared by publishing, consuming and the scheduler lease."""

    def __init__(self, link: AmqpLink, topo: Topology, cascade_key: str) -> None:
        self.link = link
        self.topo = topo
        self.cascade_key = cascade_key
        self.declared: set[str] = set()  # potatoq queues declared by this process (I/O thread)

    def ensure(self, queue: str, *, force: bool = False) -> Op[None]:
        if force or queue not in self.declared:
            yield from declare.ensure_queue(self.link, self.topo, queue, self.cascade_key)
            self.declared.add(queue)

    # -- building messages

    def outgoing(
        self, message: Message, now: float, body: bytes | None = None, *, once: bool = False
    ) -> Outgoing:
        """The publish that enqueues ``message``: straight to its band queue when due,
        else into the delay cascade. ``once``: a copy may be published again under the same
        id (see ``H_ONCE``)."""
        amqp_queue = self.topo.queue_for(message.queue, message.priority)
        props = properties_for(message.id, {H_ONCE: 1} if once else None)
        raw = message.encode() if body is None else body
        seconds = delay.whole_seconds(message.eta - now) if message.eta is not None else 0
        if seconds > 0:
            publish = Publish(
                delay.entry_exchange(seconds), delay.routing_key(seconds, amqp_queue), raw, props
            )
            return Outgoing(publish, message.queue, delayed=True)
        return Outgoing(Publish("", amqp_queue, raw, props), message.queue, delayed=False)

    # -- publishing

    def publish_all(self, items: Sequence[Outgoing]) -> Op[None]:
        """Publish ``items`` with confirms, waiting once for the whole batch.

        An unroutable message means its queue doesn't exist yet: declare it and publish
        again. A nack means RabbitMQ refused it (a queue at its length limit with
        ``reject-publish``): raise. Delayed messages need their destination queue and the
        cascade before they are published (the cascade always routes them).
        """
        todo = list(items)
        for item in todo:
            if item.delayed:
                yield from declare.ensure_cascade(self.link, self.cascade_key)
                yield from self.ensure(item.queue)
        for attempt in range(PUBLISH_ATTEMPTS):
            if not todo:
                return
            yield self.link.pub_channel()
            try:
                yield self.link.publish([item.publish for item in todo])
            except ChannelLost as exc:
                # e.g. 404: a cascade exchange was deleted under us. Re-declare, retry all
                # of the batch (some may be duplicates: enqueue is at-least-once).
                log.warning("publish channel closed while publishing (%s); retrying", exc)
                if exc.reply_code == declare.NOT_FOUND:
                    declare.forget_cascade(self.cascade_key)
                    yield from declare.ensure_cascade(self.link, self.cascade_key)
                    for queue in {item.queue for item in todo}:
                        yield from self.ensure(queue, force=True)
                else:
                    yield self.link.sleep(0.05 * (attempt + 1))
                continue
            nacked = [item for item in todo if item.publish.nacked]
            if nacked:
                queues = sorted({item.queue for item in nacked})
                raise OperationalError(
                    f"RabbitMQ refused {len(nacked)} message(s) for queue(s) {', '.join(queues)} "
                    "(a queue at its length limit rejects publishes)"
                )
            returned = [item for item in todo if item.publish.returned]
            for queue in sorted({item.queue for item in returned}):
                yield from self.ensure(queue, force=True)
            todo = returned
        if todo:
            raise OperationalError(
                f"{len(todo)} message(s) stayed unroutable after declaring their queue(s) "
                f"{', '.join(sorted({item.queue for item in todo}))}"
            )


def now() -> float:
    return time.time()
