"""Periodic-scheduler leadership: a token message in a single-active-consumer queue.

``P potatoq.scheduler`` is a quorum queue with ``x-single-active-consumer``: RabbitMQ
delivers to one consumer at a time and the others wait. It holds one token message that
is never acked. Every process that wants to run the scheduler consumes it with prefetch
1 on a channel of its own; the one holding the token is the leader. When the leader's
connection closes (clean shutdown, crash, SIGKILL) RabbitMQ returns the token and hands
it to the next consumer within milliseconds; a lost host is noticed after the heartbeat
timeout (60 s by default).

The token is published by a process that finds the queue empty with no consumer. Two
processes starting at the same instant may both publish one; the spare token is harmless
(prefetch 1: a consumer never holds two, and an unacked token blocks the rest).

RabbitMQ closes a channel whose delivery stays unacknowledged past its consumer timeout
(``consumer_timeout``, 30 min by default on 4.0.5, or a policy or queue argument), which
would take the token back and move leadership every 30 minutes. So the holder renews it
every :data:`RENEW_EVERY` seconds: publish a fresh token (confirmed), then ack the one held.
Single-active-consumer sends the fresh one to the same holder; no delivery is ever held
long enough to time out.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pika
import pika.channel

from potatoq.brokers.rabbitmq import declare
from potatoq.brokers.rabbitmq.io import AmqpLink
from potatoq.brokers.rabbitmq.ops import ChannelLost, Op, Publish
from potatoq.brokers.rabbitmq.session import Session

log = logging.getLogger("potatoq.brokers.rabbitmq")

#: Seconds between token renewals: well under any consumer timeout (RabbitMQ checks them
#: about once a minute, so a shorter timeout than that can't be enforced anyway).
RENEW_EVERY = 60.0
#: Publishes of the first token before giving up (see SchedulerLease._publish_token).
TOKEN_TRIES = 10


def token_message(queue: str) -> Publish:
    """The token: persistent, its content never read."""
    return Publish("", queue, b"scheduler token", pika.BasicProperties(delivery_mode=2, message_id="token"))


class SchedulerLease:
    """Holds (or waits for) the scheduler token for one process."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.link: AmqpLink = session.link
        self._lock = threading.Lock()
        self._wanted = False
        self._holding = False  # set on the I/O thread, read anywhere
        self._channel: pika.channel.Channel | None = None  # I/O thread
        self._tag: int | None = None  # delivery tag of the token held (I/O thread)
        # Starts of _start_op (I/O thread): a request and a reconnect can start two at once,
        # and only the latest may consume; an older one's consumer would get the token on
        # a channel this lease no longer knows, and hold it unseen for good.
        self._attempts = 0
        self.renewals = 0  # tokens renewed by this process (read by tests)

    @property
    def holding(self) -> bool:
        return self._holding and self.link.is_ready

    def request(self) -> None:
        """Start competing for the token (idempotent, returns at once)."""
        with self._lock:
            if self._wanted:
                return
            self._wanted = True
        self.link.run(self._start_op)

    def release(self) -> None:
        """Stop competing; hands the token to the next process if held."""
        with self._lock:
            if not self._wanted:
                return
            self._wanted = False
        self.link.run(self._stop_op)

    # -- I/O thread

    def on_connected(self) -> None:
        if self._wanted and (self._channel is None or not self._channel.is_open):
            self.link.spawn(self._start_op())

    def _start_op(self) -> Op[None]:
        if self._channel is not None and self._channel.is_open:
            return
        self._attempts += 1
        attempt = self._attempts
        decl = self.session.topo.scheduler_queue()
        setup: pika.channel.Channel = yield self.link.open_channel()
        try:
            setup = yield from declare.declare_queue(self.link, setup, decl)
            frame = yield self.link.rpc(setup.queue_declare, decl.name, passive=True)
        finally:
            declare.close_quietly(setup)
        published = frame.method.message_count == 0 and frame.method.consumer_count == 0
        if published:
            yield from self._publish_token(decl.name)
        if not self._wanted or (self._channel is not None and self._channel.is_open):
            return
        channel: pika.channel.Channel = yield self.link.open_channel()
        if attempt != self._attempts or (self._channel is not None and self._channel.is_open):
            declare.close_quietly(channel)  # another start consumes (or will)
            return
        self._channel = channel
        channel.add_on_close_callback(self._on_closed)
        log.info(
            "competing for the periodic-scheduler token on %s (%s)",
            decl.name,
            "published it: the queue was empty" if published else "the queue held it or a consumer",
        )
        yield self.link.rpc(channel.basic_qos, prefetch_count=1)
        channel.basic_consume(decl.name, self._on_token, auto_ack=False)

    def _publish_token(self, queue: str) -> Op[None]:
        """Publish the first token, again until RabbitMQ takes it. A quorum queue another
        process declared a moment ago can refuse it (nacked, or returned as unroutable); a
        consumer would then wait for a token nobody publishes, since a queue with a consumer
        is never given one (a second token is harmless, a missing one stops the scheduler)."""
        for attempt in range(TOKEN_TRIES):
            token = token_message(queue)
            yield self.link.pub_channel()
            yield self.link.publish([token])
            if not (token.nacked or token.returned):
                return
            log.warning(
                "the periodic-scheduler token was %s by RabbitMQ (try %d of %d)",
                "refused" if token.nacked else "returned as unroutable",
                attempt + 1,
                TOKEN_TRIES,
            )
            yield self.link.sleep(0.2 * (attempt + 1))

    def _stop_op(self) -> Op[None]:
        channel, self._channel = self._channel, None
        self._holding = False
        if channel is not None and channel.is_open:
            channel.close()
            yield self.link.sleep(0)

    def _on_token(self, channel: pika.channel.Channel, method: Any, _props: Any, _body: bytes) -> None:
        if channel is self._channel:
            if not self._holding:
                log.info("this process now holds the periodic-scheduler token")
            self._holding = True
            tag = int(method.delivery_tag)
            self._tag = tag
            self.link.call_later(RENEW_EVERY, lambda: self._renew(channel, tag))

    def _renew(self, channel: pika.channel.Channel, tag: int) -> None:
        if channel.is_open and self._tag == tag and channel is self._channel:
            self.link.spawn(self._renew_op(channel, tag))

    def _renew_op(self, channel: pika.channel.Channel, tag: int) -> Op[None]:
        """Publish a fresh token, then ack the held one (see the module docstring). If the
        publish fails the held token is kept and renewal is tried again later."""
        decl = self.session.topo.scheduler_queue()
        token = token_message(decl.name)
        try:
            yield self.link.pub_channel()
            yield self.link.publish([token])
        except ChannelLost as exc:
            log.warning("renewing the scheduler token failed (%s); keeping the one held", exc)
            token.nacked = True
        if token.nacked or token.returned:  # not in the queue: keep the held token
            self.link.call_later(RENEW_EVERY, lambda: self._renew(channel, tag))
            return
        holder: pika.channel.Channel = channel
        if holder.is_open and self._tag == tag and channel is self._channel:
            holder.basic_ack(tag)
            self.renewals += 1

    def _on_closed(self, channel: pika.channel.Channel, reason: BaseException) -> None:
        if channel is self._channel:
            self._holding = False
            self._channel = None
            if self._wanted and self.link.is_ready and self.link.connection is not None:
                log.warning("scheduler-token channel closed (%s); competing again", reason)
                self.link.spawn(self._start_op())
