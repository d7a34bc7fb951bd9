"""One reader at a time for queues read by consuming them (the registry, dead-letter queues).

:func:`.declare.read_queue` reads a queue by consuming every message and handing them back.
While one reader holds them unacked, another sees none of them and would answer that no
potatoq queue exists, or that a queue has no dead letters (four processes reading the
registry at once missed it in 45 of 60 reads). So a read first takes the queue's lock: an
exclusive queue ``<name>.reading``, which only one connection can hold (another's declare
is refused with ``405 RESOURCE_LOCKED``) and which RabbitMQ deletes with its connection,
so a reader that dies never leaves it held. Readers sharing a connection (threads of one
process) are kept apart by the link's set of held locks. Operations run on the I/O thread.
"""

from __future__ import annotations

import time
import weakref

import pika.channel

from potatoq.brokers.rabbitmq.io import AmqpLink
from potatoq.brokers.rabbitmq.ops import ChannelLost, Op

RESOURCE_LOCKED = 405
# How long a read waits for another reader of the same queue (reads take milliseconds)
# before it reads anyway: a reader stopped with its connection open can't block reads.
WAIT_SECONDS = 5.0

_HELD: weakref.WeakKeyDictionary[AmqpLink, set[str]] = weakref.WeakKeyDictionary()


def lock_name(queue: str) -> str:
    return f"{queue}.reading"


def acquire(link: AmqpLink, queue: str) -> Op[bool]:
    """Take ``queue``'s read lock; False when it stayed taken for :data:`WAIT_SECONDS`."""
    held = _HELD.setdefault(link, set())
    name = lock_name(queue)
    deadline = time.monotonic() + WAIT_SECONDS
    pause = 0.005
    while True:
        if name not in held:
            held.add(name)
            try:
                yield from _declare_exclusive(link, name)
                return True
            except ChannelLost as exc:
                held.discard(name)
                if exc.reply_code != RESOURCE_LOCKED:
                    raise
            except BaseException:
                held.discard(name)
                raise
        if time.monotonic() >= deadline:
            return False
        yield link.sleep(pause)
        pause = min(pause * 2, 0.1)


def release(link: AmqpLink, queue: str) -> Op[None]:
    """Give the lock back (delete the exclusive queue); a lost connection already did."""
    name = lock_name(queue)
    try:
        channel: pika.channel.Channel = yield link.open_channel()
        try:
            yield link.rpc(channel.queue_delete, name)
        finally:
            if channel.is_open:
                channel.close()
    except ChannelLost:
        pass
    finally:
        _HELD.get(link, set()).discard(name)


def forget(link: AmqpLink, queue: str) -> None:
    """Drop the lock from the link's set without a round trip (an abandoned read)."""
    _HELD.get(link, set()).discard(lock_name(queue))


def _declare_exclusive(link: AmqpLink, name: str) -> Op[None]:
    channel: pika.channel.Channel = yield link.open_channel()
    try:
        yield link.rpc(channel.queue_declare, name, exclusive=True, durable=False)
    finally:
        if channel.is_open:
            channel.close()
