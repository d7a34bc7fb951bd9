"""The contract suite's RabbitMQ tests of concurrency limits, rate limits and unique tasks,
run again with the limit store in a PostgreSQL and a SQLite result backend
(potatoq/brokers/rabbitmq/store_sql.py); the contract suite runs them on Redis.

A selection, through the broker (slot take and release, a burst then throttling, every
way a unique key is released, two producers racing for one key). Each transition's
replies are compared with the Redis store's, step by step, by
:func:`test_every_store_answers_each_transition_as_redis_does` (fast: no RabbitMQ). The
SIGKILL cases are in test_limits.py and the fault ledgers.
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.rabbitmq.store import LimitStore, store_of
from tests import services
from tests import test_broker_limits as limits
from tests import test_broker_rates as rates
from tests import test_broker_unique as unique
from tests.conftest import FACTORIES, BrokerMaker, FactoryContext
from tests.factories.rabbitmq import NAME, STORE_BACKENDS, backend_config, with_store_backend
from tests.test_brokers import needs

CONTRACT: list[Callable[..., None]] = [
    limits.test_claim_stops_at_the_limit_and_a_settle_frees_the_slot,
    rates.test_a_burst_is_delivered_then_the_key_is_throttled,
    unique.test_complete_dead_letter_and_revoke_release_the_key,
    unique.test_two_producers_racing_store_one_task,
]
CASES = [
    pytest.param(test, store, id=f"{store}-{test.__name__[5:]}")
    for test in CONTRACT
    for store in ("postgres", "sqlite")
]


@pytest.fixture
def rabbit_maker(tmp_path: Path) -> Iterator[BrokerMaker]:
    services.require("rabbitmq")
    maker = BrokerMaker(NAME, FACTORIES[NAME], tmp_path)
    yield maker
    maker.close()


@pytest.mark.parametrize(("contract", "store"), CASES)
def test_the_contract_on_a_sql_limit_store(
    contract: Callable[..., None], store: str, rabbit_maker: BrokerMaker
) -> None:
    if store == "postgres":
        services.require("postgres")
    maker = with_store_backend(rabbit_maker, store)
    # The contract's own fixture made the broker (``ubroker``, ``lbroker``, ``rbroker``),
    # or the test makes its brokers itself (``make_broker``).
    argument: Any = maker
    if next(iter(inspect.signature(contract).parameters)) != "make_broker":
        argument = maker()
        needs(argument, "unique_tasks" if contract.__module__ == unique.__name__ else "concurrency_limits")
    contract(argument)


# ----------------------------------------------------------------------------- transitions


def _plain(value: Any) -> Any:
    """A reply with bytes as text and nested lists as tuples, for comparing stores."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    return value


def _limits(store: LimitStore) -> list[tuple[Any, ...]]:
    return [
        (str(k), str(lim), int(r), int(w), int(o)) for k, lim, r, w, o in _plain(store.run("limit_usage", []))
    ]


def _rates(store: LimitStore) -> list[tuple[Any, ...]]:
    return [
        (str(k), float(step) if step else None, int(float(burst)) if burst else None, int(w), int(o))
        for k, step, burst, _tat, w, o, _now in _plain(store.run("rate_usage", []))
    ]


@pytest.fixture(params=STORE_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LimitStore]:
    kind = request.param
    if kind != "sqlite":
        services.require(kind)
    ctx = FactoryContext(
        tmp_path=tmp_path, unique=f"s{uuid.uuid4().hex[:10]}", overrides={"result_backend": kind}
    )
    backend = create_broker(backend_config(ctx))
    try:
        backend.migrate()
        yield store_of(backend, "the test")
    finally:
        backend.close()
        for fn in reversed(ctx.finalizers):
            fn()


def test_every_store_answers_each_transition_as_redis_does(store: LimitStore) -> None:
    run = store.run
    # Slots: two of a limit of 2, a third waits; a holder taking again keeps its own.
    assert [
        run("slot_take", ["k", 2, h, 60_000, t, 31_000])
        for h, t in (("h1", "t1"), ("h2", "t2"), ("h3", "t3"))
    ] == [1, 1, 0]
    assert run("slot_take", ["k", 2, "h1", 60_000, "t1", 31_000]) == 1
    assert _limits(store) == [("k", "2", 2, 1, 0)]
    run("slot_renew", [60_000, "k", "h1", "k", "h2"])
    run("slot_release", ["k", "h1"])
    assert run("slot_take", ["k", 2, "h3", 60_000, "t3", 31_000]) == 1  # no longer listed as waiting
    assert _limits(store) == [("k", "2", 2, 0, 0)]
    run("limit_set", ["k", 3])
    assert _limits(store) == [("k", "3", 2, 0, 1)]
    # A holder that stops renewing (a killed process) loses its slot once its lease is over.
    assert run("slot_take", ["e", 1, "dead", 1, "t4", 31_000]) == 1
    time.sleep(0.05)
    assert run("slot_take", ["e", 1, "alive", 60_000, "t5", 31_000]) == 1
    for key, holder in (("k", "h2"), ("k", "h3"), ("e", "alive")):
        run("slot_release", [key, holder])
    assert _limits(store) == [("k", "3", 0, 0, 1)]
    run("limit_set", ["k", ""])
    assert _limits(store) == []  # idle keys are forgotten

    # Rates: a burst of 2 at one a minute, then a reserved token, kept when the task is back.
    assert [_plain(run("rate_take", ["r", "60000.0", 2, t, 30_000, "", ""])) for t in ("a", "b")] == [
        (0,),
        (0,),
    ]
    wait, due, gen = _plain(run("rate_take", ["r", "60000.0", 2, "c", 30_000, "", ""]))
    assert 0 < wait <= 60_000 and gen == 0
    again = _plain(run("rate_take", ["r", "60000.0", 2, "c", 30_000, due, gen]))
    assert again[1:] == (due, gen) and 0 < again[0] <= wait  # the same token, not a new one
    assert _rates(store) == [("r", 60_000.0, 2, 1, 0)]
    run("rate_set", ["r", "10.0", 1])  # a new generation, with a full burst
    assert _plain(run("rate_take", ["r", "60000.0", 2, "c", 30_000, due, gen])) == (0,)
    assert [row[1:] for row in _rates(store)] == [(10.0, 1, 0, 1)]
    run("rate_set", ["r", "", 1])
    assert all(not row[4] for row in _rates(store))

    # Unique keys: one holder per key, a finished one taken over, released, or past its TTL.
    assert _plain(
        run("unique_take", ["u1", "A", 60_000, "", "u1", "B", 60_000, "", "u2", "C", 60_000, ""])
    ) == (2, "A")
    assert _plain(run("unique_take", ["u1", "D", 60_000, "A"])) == ()  # A finished: stale
    assert _plain(run("unique_take", ["u1", "E", 60_000, ""])) == (1, "D")
    assert _plain(run("unique_take", ["u1", "D", 60_000, ""])) == ()  # published again: its own
    run("unique_release", ["D"])
    assert _plain(run("unique_take", ["u1", "E", 60_000, ""])) == ()
    assert _plain(run("unique_take", ["u3", "F", 1, ""])) == ()
    time.sleep(0.05)
    assert _plain(run("unique_take", ["u3", "G", 60_000, ""])) == ()  # F's TTL ran out
