"""The PostgreSQL broker in the contract suite: a fresh schema per test, dropped afterwards."""

from __future__ import annotations

import uuid
from typing import Any

from potatoq.brokers.base import Broker, BrokerConfig
from tests import services

NAME = "postgres"
SERVICE = "postgres"
ORDER = 20
# transport options that make every periodic fallback slow (the due-time wake-up contract test)
SLOW_FALLBACK_OPTIONS = {"poll_interval": 60.0}


def drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def make_config(ctx: Any) -> BrokerConfig:
    url = services.url("postgres")
    schema = f"pq_{ctx.unique}"
    ctx.cleanup(lambda: drop_schema(url, schema))
    return BrokerConfig(url=url, transport_options={"schema": schema, **ctx.overrides})


def inject_raw(broker: Broker, queue: str, raw: bytes) -> str:
    """INSERT a ready row whose payload is ``raw`` as-is (e.g. garbage); returns its id."""
    import psycopg
    from psycopg import sql

    broker.migrate()
    task_id = f"raw-{uuid.uuid4()}"
    schema = getattr(broker, "schema")  # noqa: B009 - PostgresBroker's resolved schema
    with psycopg.connect(broker.config.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.potatoq_jobs (id, queue, priority, state, payload) VALUES (%s, %s, 0, 1, %s)"
            ).format(sql.Identifier(schema)),
            (task_id, queue, raw),
        )
    return task_id
