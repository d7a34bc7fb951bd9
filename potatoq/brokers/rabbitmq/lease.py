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
        decl = self.session.topo.scheduler_queue()
        setup: pika.channel.Channel = yield self.link.open_channel()
        try:
            setup = yield from declare.declare_queue(self.link, setup, decl)
            frame = yield self.link.rpc(setup.queue_declare, decl.name, passive=True)
        finally:
            declare.close_quietly(setup)
        if frame.method.message_count == 0 and frame.method.consumer_count == 0:
            token = Publish(
                "", decl.name, b"scheduler token", pika.BasicProperties(delivery_mode=2, message_id="token")
            )
            yield self.link.pub_channel()
            yield self.link.publish([token])
        if not self._wanted or (self._channel is not None and self._channel.is_open):
            return
        channel: pika.channel.Channel = yield self.link.open_channel()
        self._channel = channel
        channel.add_on_close_callback(self._on_closed)
        yield self.link.rpc(channel.basic_qos, prefetch_count=1)
        channel.basic_consume(decl.name, self._on_token, auto_ack=False)

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
        token = Publish(
            "", decl.name, b"scheduler token", pika.BasicProperties(delivery_mode=2, message_id="token")
        )
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
