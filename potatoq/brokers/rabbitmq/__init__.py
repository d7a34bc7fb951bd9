"""The RabbitMQ 4 broker (``amqp://``, ``amqps://``)."""

from __future__ import annotations

from .broker import RabbitMQBroker
from .options import RabbitMQOptions

__all__ = ["RabbitMQBroker", "RabbitMQOptions"]
