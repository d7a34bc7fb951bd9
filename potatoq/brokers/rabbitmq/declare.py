"""Declaring, probing and reading queues (operations run on the I/O thread).

Each function here is an *operation* (see :mod:`.io`): a generator that yields
:class:`~.io.Await` steps. Declarations run on a channel of their own, so that a
declare RabbitMQ refuses (a queue that already exists with other arguments answers
``406 PRECONDITION_FAILED`` and closes the channel) never takes a busy channel down.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import pika
import pika.channel

from potatoq.brokers.rabbitmq import delay, readlock
from potatoq.brokers.rabbitmq.io import AmqpLink
from potatoq.brokers.rabbitmq.ops import Await, ChannelLost, Op, Publish
from potatoq.brokers.rabbitmq.topology import QueueDecl, Topology

log = logging.getLogger("potatoq.brokers.rabbitmq")

NOT_FOUND = 404
PRECONDITION_FAILED = 406
# How long a read waits for the messages it handed back to be ready again (see read_queue).
RETURN_WAIT_SECONDS = 2.0

# The delay cascade is shared by everything on a server; declare it once per process
# and server URL (it is re-declared if a publish finds it missing).
_CASCADE_DECLARED: set[str] = set()
_CASCADE_LOCK = threading.Lock()
_WARNED: set[str] = set()


def _new_lock_in_child() -> None:
    # The worker supervisor forks children while its pika I/O thread runs, and that thread
    # takes this lock: a fork at that instant would leave the child's copy locked forever.
    global _CASCADE_LOCK
    _CASCADE_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_in_child)


def cascade_declared(key: str) -> bool:
    with _CASCADE_LOCK:
        return key in _CASCADE_DECLARED


def forget_cascade(key: str) -> None:
    with _CASCADE_LOCK:
        _CASCADE_DECLARED.discard(key)


def close_quietly(channel: pika.channel.Channel) -> None:
    if channel.is_open:
        channel.close()


def declare_queue(link: AmqpLink, channel: pika.channel.Channel, decl: QueueDecl) -> Op[pika.channel.Channel]:
    """Declare ``decl`` on ``channel``; returns the channel to go on with (a new one if the
    server refused the arguments, which is logged once: the existing queue is used)."""
    try:
        yield link.rpc(channel.queue_declare, decl.name, durable=decl.durable, arguments=decl.arguments)
        return channel
    except ChannelLost as exc:
        if exc.reply_code != PRECONDITION_FAILED:
            raise
        if decl.name not in _WARNED:
            _WARNED.add(decl.name)
            log.warning(
                "queue %s exists with other arguments than this config asks for (%s); using it as it is",
                decl.name,
                exc,
            )
        fresh: pika.channel.Channel = yield link.open_channel()
        return fresh


def ensure_cascade(link: AmqpLink, key: str) -> Op[None]:
    """Declare the 28-level delay cascade (idempotent; once per process and server)."""
    if cascade_declared(key):
        return
    plan = delay.plan()
    channel: pika.channel.Channel = yield link.open_channel()
    try:
        for name, kind, arguments in plan.exchanges:
            yield link.rpc(
                channel.exchange_declare, name, exchange_type=kind, durable=True, arguments=arguments
            )
        for name, arguments in plan.queues:
            channel = yield from declare_queue(link, channel, QueueDecl(name, arguments))
        for queue, exchange, routing_key in plan.queue_bindings:
            yield link.rpc(channel.queue_bind, queue, exchange, routing_key)
        for destination, source, routing_key in plan.exchange_bindings:
            yield link.rpc(channel.exchange_bind, destination, source, routing_key)
    finally:
        close_quietly(channel)
    with _CASCADE_LOCK:
        _CASCADE_DECLARED.add(key)


def queue_exists(link: AmqpLink, name: str) -> Op[tuple[int, int] | None]:
    """(ready messages, consumers) of queue ``name``, or None if it doesn't exist."""
    channel: pika.channel.Channel = yield link.open_channel()
    try:
        frame = yield link.rpc(channel.queue_declare, name, passive=True)
    except ChannelLost as exc:
        if exc.reply_code == NOT_FOUND:
            return None
        raise
    close_quietly(channel)
    return frame.method.message_count, frame.method.consumer_count


def ensure_queue(link: AmqpLink, topo: Topology, queue: str, cascade_key: str) -> Op[None]:
    """Declare potatoq queue ``queue``: its dead-letter queue, its band queues, their
    bindings to the delay cascade's delivery exchange, and its entry in the registry.

    The registry entry is added once per queue, not once per process (see
    :func:`register_queue`).
    """
    yield from ensure_cascade(link, cascade_key)
    decls = topo.work_queues(queue)
    channel: pika.channel.Channel = yield link.open_channel()
    try:
        for decl in decls:
            channel = yield from declare_queue(link, channel, decl)
        for decl in decls[1:]:
            yield link.rpc(channel.queue_bind, decl.name, delay.DELIVERY, delay.delivery_binding(decl.name))
    finally:
        close_quietly(channel)
    yield from register_queue(link, topo, queue)


def register_queue(link: AmqpLink, topo: Topology, queue: str) -> Op[None]:
    """Add potatoq queue ``queue`` to the registry unless it is there already.

    Every process start, child recycle and lost work channel declares its queues again;
    one registry entry each would grow the registry without bound. A marker queue per
    potatoq queue (``topo.registered_marker``: at most one message, further publishes
    refused) says whether the entry was written: its declare reports the marker, so a
    registered queue costs one declare and no publish. The entry is published before
    the marker, so a crash in between writes the entry again (a duplicate, removed when
    the registry is read) and never leaves a queue out.
    """
    marker = topo.registered_marker(queue)
    channel: pika.channel.Channel = yield link.open_channel()
    try:
        channel = yield from declare_queue(link, channel, topo.registry_queue())
        frame = yield link.rpc(
            channel.queue_declare, marker.name, durable=marker.durable, arguments=marker.arguments
        )
    finally:
        close_quietly(channel)
    if frame.method.message_count:
        return
    entry = Publish(
        "",
        topo.registry,
        queue.encode(),
        pika.BasicProperties(delivery_mode=2, message_id=queue, timestamp=int(time.time())),
    )
    mark = Publish("", marker.name, b"registered", pika.BasicProperties(delivery_mode=2))
    yield link.pub_channel()
    yield link.publish([entry])
    yield link.publish([mark])  # nacked if another process marked it meanwhile: fine


def registered_queues(link: AmqpLink, topo: Topology) -> Op[list[str]]:
    """Every potatoq queue in the registry, in registration order; duplicate entries
    (one per process that declared the queue) are removed as they are read."""
    seen: dict[str, None] = {}

    def compact(messages: list[ReadMessage]) -> Op[None]:
        for message in messages:
            name = message.body.decode("utf-8", "replace")
            if name in seen:
                message.ack = True
            else:
                seen[name] = None
        return
        yield  # pragma: no cover - makes this an operation

    # Declared first (idempotent): reading a missing queue would close the channel with a
    # logged 404 on every call before the first queue exists.
    channel: pika.channel.Channel = yield link.open_channel()
    try:
        channel = yield from declare_queue(link, channel, topo.registry_queue())
    finally:
        close_quietly(channel)
    yield from read_queue(link, topo.registry, compact)
    return list(seen)


class ReadMessage:
    """A message read by :func:`read_queue`; set ``ack`` to remove it when the read ends."""

    __slots__ = ("ack", "body", "properties", "tag")

    def __init__(self, tag: int, properties: Any, body: bytes) -> None:
        self.tag = tag
        self.properties = properties
        self.body = body
        self.ack = False


def read_queue(
    link: AmqpLink,
    name: str,
    decide: Any = None,
) -> Op[list[ReadMessage]]:
    """Read every message of queue ``name`` without removing or reordering them, holding
    the queue's read lock (:mod:`.readlock`: a concurrent read would see none of them)."""
    locked = yield from readlock.acquire(link, name)
    try:
        messages = yield from _read_all(link, name, decide)
    except GeneratorExit:  # abandoned: no more steps; our connection's end frees the lock
        readlock.forget(link, name)
        raise
    except Exception:
        if locked:
            yield from readlock.release(link, name)
        raise
    if locked:
        yield from readlock.release(link, name)
    return messages


def _read_all(link: AmqpLink, name: str, decide: Any) -> Op[list[ReadMessage]]:
    """Read every message of queue ``name`` without removing or reordering them.

    The messages are consumed on a channel of their own (unlimited prefetch), the
    consumer is cancelled (after cancel-ok every delivery has arrived), then
    ``decide(messages)`` may run (an operation: it may publish, and mark messages
    ``ack``), then the acked ones are removed and the rest handed back with one
    ``basic.nack(multiple, requeue)``. RabbitMQ puts returned messages back at the head
    of a quorum queue in the order returned, so the order is unchanged. Each read counts
    as a delivery, which is why queues read this way have no delivery limit.
    """
    channel: pika.channel.Channel = yield link.open_channel()
    try:
        frame = yield link.rpc(channel.queue_declare, name, passive=True)
    except ChannelLost as exc:
        if exc.reply_code == NOT_FOUND:
            return []
        raise
    expected = frame.method.message_count
    if expected == 0:
        close_quietly(channel)
        return []
    messages: list[ReadMessage] = []
    arrived: list[Any] = []  # one resume to call when the expected count is reached

    def on_message(_ch: Any, method: Any, properties: Any, body: bytes) -> None:
        messages.append(ReadMessage(method.delivery_tag, properties, body))
        if len(messages) >= expected and arrived:
            arrived.pop()()

    try:
        yield link.rpc(channel.basic_qos, prefetch_count=0)
        tag = channel.basic_consume(name, on_message, auto_ack=False)

        def wait_all(resume: Any) -> None:
            if len(messages) >= expected:
                resume()
                return
            arrived.append(resume)
            # Someone may take messages while we read: don't wait forever for them.
            link.call_later(2.0, lambda: _resume_first(arrived))

        yield Await(channel, wait_all)
        yield from cancel_consumer(link, channel, tag)
        if decide is not None:
            yield from decide(messages)
        for message in messages:
            if message.ack:
                channel.basic_ack(message.tag)
        rest = [m.tag for m in messages if not m.ack]
        if rest:
            channel.basic_nack(max(rest), multiple=True, requeue=True)
        # The nack's round trip isn't enough: a quorum queue takes the messages back through
        # its log, after the reply. Wait until they count as ready again (bounded), so that
        # the next reader, who takes the read lock after us, sees every one of them.
        deadline = time.monotonic() + RETURN_WAIT_SECONDS
        while True:
            frame = yield link.rpc(channel.queue_declare, name, passive=True)
            if frame.method.message_count >= len(rest) or time.monotonic() >= deadline:
                break
            yield link.sleep(0.005)
    finally:
        close_quietly(channel)
    return messages


def _resume_first(waiting: list[Any]) -> None:
    if waiting:
        waiting.pop()()


def cancel_consumer(link: AmqpLink, channel: pika.channel.Channel, consumer_tag: str) -> Op[None]:
    """basic.cancel that keeps deliveries racing the cancel (see :func:`cancel_keeping`)."""
    yield Await(channel, lambda resume: cancel_keeping(channel, consumer_tag, resume))


def cancel_keeping(channel: pika.channel.Channel, consumer_tag: str, on_ok: Any = None) -> None:
    """Cancel a consumer but keep the deliveries that arrive before the cancel-ok.

    pika rejects such deliveries with requeue, and on RabbitMQ 4.0 every requeue counts
    towards the quorum queue's delivery limit: a message could be dead-lettered without
    ever having run. So the consumer's callback keeps receiving them until cancel-ok
    (pika marks the consumer as cancelling in ``Channel._cancelled``, which we undo).
    """
    if not channel.is_open or consumer_tag not in channel.consumer_tags:
        if on_ok is not None:
            on_ok(None)
        return
    channel.basic_cancel(consumer_tag, callback=on_ok or (lambda _frame: None))
    cancelling = getattr(channel, "_cancelled", None)
    if isinstance(cancelling, set):
        cancelling.discard(consumer_tag)


def delete_queues(link: AmqpLink, names: list[str]) -> Op[int]:
    """Delete queues (missing ones are fine); returns how many existed."""
    deleted = 0
    for name in names:
        channel: pika.channel.Channel = yield link.open_channel()
        try:
            yield link.rpc(channel.queue_delete, name)
            deleted += 1
        except ChannelLost as exc:
            if exc.reply_code != NOT_FOUND:
                raise
        finally:
            close_quietly(channel)
    return deleted


def purge_queues(link: AmqpLink, names: list[str]) -> Op[int]:
    """Purge ready messages of existing queues; returns how many were removed."""
    removed = 0
    for name in names:
        if (yield from queue_exists(link, name)) is None:
            continue
        channel: pika.channel.Channel = yield link.open_channel()
        try:
            frame = yield link.rpc(channel.queue_purge, name)
            removed += frame.method.message_count
        finally:
            close_quietly(channel)
    return removed
