"""Dramatiq with its default middleware, on Redis or RabbitMQ:
``dramatiq benchmarks.peers.dramatiq_app -p 2`` (8 threads per process by default); only
the queue has a name of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dramatiq

from .. import record
from . import url

# Not "default": on a shared server that name may be someone else's (potatoq's own default).
QUEUE = "potatoq_bench"
if url().startswith("amqp"):
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    dramatiq.set_broker(RabbitmqBroker(url=url()))
else:
    from dramatiq.brokers.redis import RedisBroker

    dramatiq.set_broker(RedisBroker(url=url()))


@dramatiq.actor(actor_name="noop", queue_name=QUEUE)
def noop(i: int) -> None:
    record.done()


@dramatiq.actor(actor_name="stamp", queue_name=QUEUE)
def stamp(sent: float) -> None:
    record.started(sent)


TASKS = {"noop": noop, "stamp": stamp}


def send(task: str, *args: Any) -> None:
    TASKS[task].send(*args)


def send_many(task: str, args_list: Sequence[Sequence[Any]]) -> None:
    """Dramatiq's group (it sends its messages one at a time)."""
    dramatiq.group(TASKS[task].message(*args) for args in args_list).run()
