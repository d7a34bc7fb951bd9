"""RabbitMQ 4 in the contract suite: a queue prefix per test, results in a SQLite file
(or, with ``ctx.overrides["result_backend"] = "redis"``, under a Redis key prefix: what
concurrency and rate limits and unique tasks need, see :func:`with_redis_backend`).

The shared delay cascade (``potatoq.delay.*``) stays between tests; everything under the
test's prefix is deleted afterwards.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pika

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig

from .. import services

NAME = "rabbitmq"
SERVICE = "rabbitmq"
ORDER = 40


def with_redis_backend(maker: Any) -> Any:
    """``maker`` (a BrokerMaker) set to give RabbitMQ brokers a Redis result backend; other
    broker kinds are left as they are."""
    if maker.name == NAME:
        maker.ctx.overrides["result_backend"] = "redis"
    return maker


def make_config(ctx: Any) -> BrokerConfig:
    if ctx.overrides.get("result_backend") == "redis":
        from . import redis as redis_factory

        backend = create_broker(redis_factory.make_config(ctx))
    else:
        backend = create_broker(BrokerConfig(url=f"sqlite:///{ctx.tmp_path / 'rb.sqlite3'}"))
    # Made now, in the parent: tests that fork many children at once then never race to
    # create the file and switch it to WAL (SQLite answers "database is locked" to that).
    backend.migrate()
    config = BrokerConfig(
        url=services.url("rabbitmq"),
        transport_options={"queue_prefix": f"{ctx.unique}_"},
        result_backend=backend,
    )

    def drop_queues() -> None:
        broker = create_broker(config)
        try:
            broker.drop_all()  # type: ignore[attr-defined]
        finally:
            broker.close()
            with contextlib.suppress(Exception):
                backend.close()

    ctx.cleanup(drop_queues)
    return config


def inject_raw(broker: Any, queue: str, raw: bytes) -> str:
    """Publish ``raw`` as-is (e.g. garbage) into ``queue``'s lowest band; returns its id."""
    state = broker._process()
    state.link.run(state.session.ensure, queue)
    task_id = f"raw-{time.monotonic_ns()}"
    connection = pika.BlockingConnection(pika.URLParameters(broker.config.url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish(
            "",
            broker.topology.queue_for(queue, 0),
            raw,
            pika.BasicProperties(delivery_mode=2, message_id=task_id),
            mandatory=True,
        )
    finally:
        connection.close()
    return task_id
