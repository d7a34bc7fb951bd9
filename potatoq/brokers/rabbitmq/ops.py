"""What operations on the RabbitMQ I/O thread are made of: an :data:`Op` is a generator that
yields :class:`Await` steps; :class:`Publish` is one confirmed publish; :class:`ChannelLost`
is thrown into an operation whose channel closed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import Any, TypeVar

import pika
import pika.channel
import pika.spec

from potatoq.exceptions import OperationalError

T = TypeVar("T")


class ChannelLost(OperationalError):
    """The channel an operation was waiting on closed (server error or connection loss)."""

    def __init__(self, reason: str, reply_code: int = 0) -> None:
        super().__init__(reason)
        self.reply_code = reply_code


# An operation: a generator run on the I/O thread; it yields Awaits and returns a value.
Op = Generator["Await", Any, T]


@dataclasses.dataclass(slots=True)
class Await:
    """What an operation yields: ``start(resume)`` begins an asynchronous step and calls
    ``resume(value)`` (or ``resume(error=exc)``) when it completes. ``channel`` is the
    channel the step depends on (None: the connection)."""

    channel: pika.channel.Channel | None
    start: Callable[[Callable[..., None]], None]


@dataclasses.dataclass(slots=True)
class Publish:
    """One message to publish with confirms; ``returned`` / ``nacked`` are filled in."""

    exchange: str
    routing_key: str
    body: bytes
    properties: pika.BasicProperties
    returned: bool = False
    nacked: bool = False


@dataclasses.dataclass(slots=True)
class _ConfirmBatch:
    pending: set[int]
    items: dict[int, Publish]
    resume: Callable[..., None] | None = None
