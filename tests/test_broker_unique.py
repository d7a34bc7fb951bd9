"""The broker contract for unique tasks (potatoq/brokers/unique.py): the same fixtures as
tests/test_brokers.py, once per broker in ``tests/factories``; brokers without
``capabilities.unique_tasks`` are skipped."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from potatoq.brokers.base import Broker, Complete, DeadLetter, RetryLater
from potatoq.brokers.unique import HEADER
from potatoq.message import Message

from .conftest import BrokerMaker
from .factories.rabbitmq import with_redis_backend
from .test_brokers import (
    WORKER_A,
    WORKER_B,
    assert_nothing_claimable,
    claim_soon,
    msg,
    needs,
    poll,
    recover_until,
)


def unique(
    key: str, queue: str = "default", *, seconds: float | None = None, running: bool = True, **kw: Any
) -> Message:
    return msg(queue, headers={HEADER: [key, seconds, int(running)]}, **kw)


def sent_as(broker: Broker, message: Message) -> str:
    """Enqueue ``message``; the id of the task that now holds its key."""
    broker.enqueue([message])
    return message.duplicate_of or message.id


@pytest.fixture
def ubroker(make_broker: BrokerMaker) -> Broker:
    broker = with_redis_backend(make_broker)()
    needs(broker, "unique_tasks")
    return broker


def test_a_duplicate_returns_the_waiting_tasks_id_and_is_not_stored(ubroker: Broker) -> None:
    first, second, other = unique("report[1]"), unique("report[1]"), unique("report[2]")
    ubroker.enqueue([first])
    ubroker.enqueue([second, other])
    assert first.duplicate_of is None and other.duplicate_of is None
    assert second.duplicate_of == first.id
    got = {claim_soon(ubroker, ["default"]).id for _ in range(2)}
    assert got == {first.id, other.id}
    assert_nothing_claimable(ubroker, ["default"])


def test_scheduled_and_running_tasks_hold_their_key(ubroker: Broker) -> None:
    later = unique("later", eta=time.time() + 3600)
    assert sent_as(ubroker, later) == later.id
    assert sent_as(ubroker, unique("later")) == later.id
    running = unique("running")
    ubroker.enqueue([running])
    delivery = claim_soon(ubroker, ["default"])
    assert delivery.id == running.id
    assert sent_as(ubroker, unique("running")) == running.id
    assert_nothing_claimable(ubroker, ["default"])


def test_complete_dead_letter_and_revoke_release_the_key(ubroker: Broker) -> None:
    for outcome in (Complete(), DeadLetter(reason="boom")):
        held = unique("k")
        assert sent_as(ubroker, held) == held.id
        delivery = claim_soon(ubroker, ["default"])
        assert sent_as(ubroker, unique("k")) == held.id
        assert ubroker.settle(delivery, outcome) is True
        again = unique("k")
        assert sent_as(ubroker, again) == again.id, f"key still held after {type(outcome).__name__}"
        assert ubroker.settle(claim_soon(ubroker, ["default"]), Complete()) is True
    if ubroker.capabilities.revoke_deletes:
        waiting = unique("k")
        ubroker.enqueue([waiting])
        assert sent_as(ubroker, unique("k")) == waiting.id
        ubroker.revoke(waiting.id)
        fresh = unique("k")
        assert sent_as(ubroker, fresh) == fresh.id, "key still held after revoke"


def test_a_retry_keeps_the_key_and_purge_releases_it(ubroker: Broker) -> None:
    held = unique("k", "uq")
    ubroker.enqueue([held])
    delivery = claim_soon(ubroker, ["uq"])
    assert delivery.message is not None
    retried = delivery.message.replace(retries=1, eta=time.time() + 3600)
    assert ubroker.settle(delivery, RetryLater(message=retried)) is True
    assert sent_as(ubroker, unique("k", "uq")) == held.id
    if ubroker.capabilities.full_stats:
        assert ubroker.purge(["uq"]) == 1
        fresh = unique("k", "uq")
        assert sent_as(ubroker, fresh) == fresh.id, "key still held after purge"


def test_a_key_released_at_start_lets_a_new_task_wait_while_one_runs(ubroker: Broker) -> None:
    first = unique("k", running=False)
    ubroker.enqueue([first])
    assert claim_soon(ubroker, ["default"]).id == first.id
    second = unique("k", running=False)
    assert sent_as(ubroker, second) == second.id
    assert sent_as(ubroker, unique("k", running=False)) == second.id


def test_unique_for_releases_a_key_whatever_holds_it(ubroker: Broker) -> None:
    bounded = unique("long", seconds=3600)
    ubroker.enqueue([bounded])
    assert sent_as(ubroker, unique("long", seconds=3600)) == bounded.id
    held = unique("k", seconds=0.5)
    ubroker.enqueue([held])
    poll(lambda: sent_as(ubroker, unique("k", seconds=0.5)) != held.id, "the key to be released", every=0.1)


def test_two_producers_racing_store_one_task(make_broker: BrokerMaker) -> None:
    producers = [with_redis_backend(make_broker)() for _ in range(4)]
    needs(producers[0], "unique_tasks")
    for producer in producers:  # connect and create the schema before the race
        producer.enqueue([msg("warmup")])
    gate = threading.Barrier(len(producers))
    messages = [unique("race") for _ in producers]
    errors: list[BaseException] = []

    def send(i: int) -> None:
        try:
            gate.wait(timeout=30)
            producers[i].enqueue([messages[i]])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(producers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    stored = [m for m in messages if m.duplicate_of is None]
    assert len(stored) == 1
    assert {m.duplicate_of for m in messages if m is not stored[0]} == {stored[0].id}
    assert claim_soon(producers[0], ["default"]).id == stored[0].id
    assert_nothing_claimable(producers[0], ["default"])


def test_a_killed_worker_never_leaves_its_key_held(make_broker: BrokerMaker) -> None:
    broker = make_broker(dead_after=0.2)
    needs(broker, "unique_tasks")
    needs(broker, "recovers_dead_holders")
    held = unique("k")
    broker.enqueue([held])
    lost = claim_soon(broker, ["default"], WORKER_A)  # WORKER_A never settles: killed
    recover_until(broker, dead_after=0.2, max_deliveries=5)
    assert sent_as(broker, unique("k")) == held.id  # the same task, still holding the key
    again = claim_soon(broker, ["default"], WORKER_B)
    assert again.id == lost.id
    assert broker.settle(again, Complete()) is True
    fresh = unique("k")
    assert sent_as(broker, fresh) == fresh.id


@contextlib.contextmanager
def caller_connection(broker: Broker) -> Iterator[Any]:
    """A DB-API connection of the broker's own database, in a transaction of its own."""
    if hasattr(broker, "schema"):  # PostgreSQL
        import psycopg

        with psycopg.connect(broker.config.url) as conn:
            yield conn
    else:
        broker.migrate()
        with contextlib.closing(sqlite3.connect(getattr(broker, "path"))) as conn:  # noqa: B009
            yield conn


def test_in_a_callers_transaction_the_key_commits_with_the_task(ubroker: Broker) -> None:
    needs(ubroker, "transactional_enqueue")
    with caller_connection(ubroker) as conn:
        rolled_back = unique("tx")
        ubroker.enqueue([rolled_back], connection=conn)
        conn.rollback()
        committed = unique("tx")
        ubroker.enqueue([committed], connection=conn)
        assert committed.duplicate_of is None, "the rolled-back task left its key held"
        duplicate = unique("tx")
        ubroker.enqueue([duplicate], connection=conn)
        assert duplicate.duplicate_of == committed.id
        conn.commit()
    assert sent_as(ubroker, unique("tx")) == committed.id
    assert claim_soon(ubroker, ["default"]).id == committed.id
    assert_nothing_claimable(ubroker, ["default"])


def test_a_retried_dead_letter_takes_its_key_again_or_waits_while_another_holds_it(ubroker: Broker) -> None:
    dead = unique("k")
    ubroker.enqueue([dead])
    assert ubroker.settle(claim_soon(ubroker, ["default"]), DeadLetter(reason="boom")) is True
    holder = unique("k")
    ubroker.enqueue([holder])
    assert ubroker.retry_dead() == 0  # the key is held by another task: still a dead letter
    assert ubroker.settle(claim_soon(ubroker, ["default"]), Complete()) is True
    assert ubroker.retry_dead() == 1
    assert sent_as(ubroker, unique("k")) == dead.id


def test_a_periodic_run_whose_key_is_held_is_not_queued_again(ubroker: Broker) -> None:
    running = unique("nightly")
    ubroker.enqueue([running])
    delivery = claim_soon(ubroker, ["default"])
    now = time.time()
    assert ubroker.claim_fire_time("nightly", now, unique("nightly")) is True  # the fire time is taken
    assert_nothing_claimable(ubroker, ["default"])  # ... but no second run piles up
    assert ubroker.settle(delivery, Complete()) is True
    later = unique("nightly")
    assert ubroker.claim_fire_time("nightly", now + 60, later) is True
    assert claim_soon(ubroker, ["default"]).id == later.id
