"""RabbitMQ 4 in the contract suite: a queue prefix per test, results (and the limit store:
concurrency slots, rate tokens, unique keys) in a SQLite file; with
``ctx.overrides["result_backend"]`` set to ``"redis"`` or ``"postgres"``, under a Redis key
prefix or in a PostgreSQL schema of the test's own instead (see :func:`with_store_backend`).

The shared delay cascade (``potatoq.delay.*``) stays between tests; everything under the
test's prefix is deleted afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

import pika

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig

from .. import services

NAME = "rabbitmq"
SERVICE = "rabbitmq"
ORDER = 40


#: The result backends that hold RabbitMQ's limit store, as ``result_backend`` overrides.
STORE_BACKENDS = ("redis", "postgres", "sqlite")


def with_store_backend(maker: Any, backend: str) -> Any:
    """``maker`` (a BrokerMaker) set to give RabbitMQ brokers a ``backend`` result backend
    (one of :data:`STORE_BACKENDS`); other broker kinds are left as they are."""
    if maker.name == NAME:
        maker.ctx.overrides["result_backend"] = backend
    return maker


def with_redis_backend(maker: Any) -> Any:
    """``maker`` set to give RabbitMQ brokers a Redis result backend, unless it was given
    another already (the contract suite's limit and unique tests run on Redis;
    tests/brokers/rabbitmq/test_sql_store.py runs them again on PostgreSQL and SQLite)."""
    if maker.name == NAME:
        maker.ctx.overrides.setdefault("result_backend", "redis")
    return maker


def backend_config(ctx: Any) -> BrokerConfig:
    """The result backend's config for ``ctx``: its own key prefix, schema or file."""
    kind = ctx.overrides.get("result_backend", "sqlite")
    if kind == "redis":
        from . import redis as redis_factory

        return redis_factory.make_config(ctx)
    if kind == "postgres":
        from . import postgres as postgres_factory

        # its own context: the PostgreSQL factory reads overrides as transport options
        sub = dataclasses.replace(ctx, overrides={}, finalizers=ctx.finalizers)
        return postgres_factory.make_config(sub)
    return BrokerConfig(url=f"sqlite:///{ctx.tmp_path / 'rb.sqlite3'}")


def make_config(ctx: Any) -> BrokerConfig:
    backend = create_broker(backend_config(ctx))
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
