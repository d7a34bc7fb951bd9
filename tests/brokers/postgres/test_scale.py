"""PostgreSQL at scale: housekeeping keeps pace with a backlog larger than one batch."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig
from potatoq.brokers.postgres import PostgresBroker, statements
from potatoq.brokers.postgres.sweep import SWEEP_BATCH
from tests import services
from tests.factories.postgres import drop_schema


@pytest.fixture
def broker() -> Iterator[PostgresBroker]:
    url = services.require("postgres")
    schema = f"pq_{uuid.uuid4().hex[:12]}"
    made = create_broker(BrokerConfig(url=url, transport_options={"schema": schema}))
    assert isinstance(made, PostgresBroker)
    made.migrate()
    yield made
    made.close()
    drop_schema(url, schema)


def test_one_housekeeping_call_deletes_an_expired_backlog_of_several_batches(broker: PostgresBroker) -> None:
    expired = 2 * SWEEP_BATCH + 7
    table = sql.SQL("{}.potatoq_results").format(sql.Identifier(broker.schema))
    with psycopg.connect(broker.config.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (task_id, state, record, expires_at)"
                " SELECT 'live-' || i, 'SUCCESS', '\\x00'::bytea, now() + interval '1 hour'"
                " FROM generate_series(1, 20000) AS i"
            ).format(table)
        )
        # statistics from before the burst of expired rows (autovacuum hasn't seen it yet)
        conn.execute(sql.SQL("ANALYZE {}").format(table))
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (task_id, state, record, expires_at)"
                " SELECT 'old-' || i, 'SUCCESS', '\\x00'::bytea, now() - interval '1 minute'"
                " FROM generate_series(1, %s) AS i"
            ).format(table),
            (expired,),
        )
        sweep = statements.Statements(broker.schema)["maintenance_sweep"].query
        params = {"batch": SWEEP_BATCH, "periodic_keep": 86400.0}
        plan = "\n".join(r[0] for r in conn.execute(b"EXPLAIN " + sweep, params))
        # each batch is deleted by primary-key probes, not by testing every expired row
        # against the batch's array (seconds per batch at 50,000 expired rows)
        assert "Index Cond: (task_id = ANY" in plan, plan
        broker._housekeeping()
        left = conn.execute(
            sql.SQL("SELECT task_id LIKE 'live-%%', count(*) FROM {} GROUP BY 1").format(table)
        )
        assert dict(left.fetchall()) == {True: 20000}
