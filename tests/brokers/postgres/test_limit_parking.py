"""The one interleaving that can strand tasks behind a PostgreSQL concurrency limit, forced
step by step: a claim parks a full key's ready tasks while, concurrently, a settle frees
the key's last slot. Neither sees the other's uncommitted rows, so the settle's trigger has
no parked task to hand the slot to and the tasks stay parked with the slot free. Recovery's
``limit_unpark`` is the backstop that puts them back (``sql/limits.sql``)."""

from __future__ import annotations

from typing import Any

import psycopg

from potatoq.brokers.base import Complete, WorkerRef
from potatoq.brokers.limits import HEADER

from .conftest import Make
from .test_broker import WORKER, claim_within, msg


def parked(url: str, schema: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".potatoq_jobs WHERE parked').fetchone()
    return int(row[0]) if row else 0


def test_tasks_parked_while_their_last_slot_was_freed_run_after_the_next_recovery(
    make: Make,  # noqa: F811
    pg_url: str,  # noqa: F811
) -> None:
    broker = make()
    schema = broker.options.schema
    assert schema is not None
    sent = [msg(headers={HEADER: ["exports", 1]}) for _ in range(3)]
    broker.enqueue(sent)
    first = claim_within(broker, ["default"])
    assert first.id == sent[0].id  # the key's one slot is taken

    claim = broker._statements()["job_claim"].query
    params: dict[str, Any] = {**broker._claim_params(["default"], WorkerRef("other", 1)), "park": True}
    with psycopg.connect(pg_url) as parker:  # a second worker's claim, caught before its commit
        assert parker.execute(claim, params).fetchone() is None  # key full: it parks the other two
        assert broker.settle(first, Complete()) is True  # frees the slot; the parked rows are locked
        parker.commit()

    assert parked(pg_url, schema) == 2
    assert broker.claim(["default"], WORKER) is None  # stranded: slot free, both tasks parked
    broker.recover(dead_after=60.0, max_deliveries=5)
    assert parked(pg_url, schema) == 1  # one free slot: one task back in line
    second = claim_within(broker, ["default"])
    assert second.id == sent[1].id
    assert broker.settle(second, Complete()) is True  # the trigger hands the slot on as usual
    assert claim_within(broker, ["default"]).id == sent[2].id
