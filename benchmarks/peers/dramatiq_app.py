"""Dramatiq with its default middleware, on Redis or RabbitMQ:
``dramatiq benchmarks.peers.dramatiq_app -p 2`` (8 threads per process by default)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dramatiq

from .. import record
from . import url

if url().startswith("amqp"):
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    dramatiq.set_broker(RabbitmqBroker(url=url()))
else:
    from dramatiq.brokers.redis import RedisBroker

    dramatiq.set_broker(RedisBroker(url=url()))


@dramatiq.actor(actor_name="noop")
def noop(i: int) -> None:
    record.done()


@dramatiq.actor(actor_name="stamp")
def stamp(sent: float) -> None:
    record.started(sent)


TASKS = {"noop": noop, "stamp": stamp}


def send(task: str, *args: Any) -> None:
    TASKS[task].send(*args)


def send_many(task: str, args_list: Sequence[Sequence[Any]]) -> None:
    """Dramatiq's group (it sends its messages one at a time)."""
    dramatiq.group(TASKS[task].message(*args) for args in args_list).run()
