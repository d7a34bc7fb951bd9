"""Redis / Valkey: a claim whose reply is lost after the server ran it claims nothing more.

The client runs through :class:`ReplyDropper`, which throws away one reply and closes that
connection. redis-py would send the script again; the broker must instead find the task
the lost call claimed (by its claim token) and hand that one out: a second claim would
leave the first task claimed by nobody until its lease ran out, a delivery lost.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import Complete, WorkerRef
from potatoq.brokers.redis import RedisBroker
from potatoq.message import Message
from tests import services
from tests.conftest import FACTORIES, FactoryContext

from .reply_dropper import ReplyDropper

WORKER = WorkerRef("node-lost-reply", 777)


@pytest.fixture(params=["redis", "valkey"])
def proxied(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[RedisBroker, RedisBroker, ReplyDropper]]:
    """(broker through the dropping proxy, broker straight to the server, the proxy)."""
    module = FACTORIES[request.param]
    services.require(module.SERVICE)
    ctx = FactoryContext(tmp_path=tmp_path, unique=f"f{uuid.uuid4().hex[:10]}", overrides={})
    config = module.make_config(ctx)
    parts = urlsplit(config.url)
    proxy = ReplyDropper(parts.hostname or "127.0.0.1", parts.port or 6379)
    through = dataclasses.replace(config, url=urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}")))
    brokers = [create_broker(through), create_broker(config)]
    try:
        assert all(isinstance(b, RedisBroker) for b in brokers)
        yield brokers[0], brokers[1], proxy  # type: ignore[misc]
    finally:
        for broker in brokers:
            broker.close()
        proxy.close()
        for fn in reversed(ctx.finalizers):
            fn()


def _counts(direct: RedisBroker) -> tuple[int, int]:
    """(ready, running) of the default queue, read straight from the server."""
    client = direct._client()
    return client.zcard(direct.keys.ready("default")), client.zcard(direct.keys.active("default"))


def _messages(n: int) -> list[Message]:
    return [
        Message(id=f"lost-reply-{i}-{uuid.uuid4().hex[:6]}", task="faults.add", queue="default")
        for i in range(n)
    ]


def test_claim_whose_reply_was_lost_is_not_run_twice(
    proxied: tuple[RedisBroker, RedisBroker, ReplyDropper],
) -> None:
    broker, direct, proxy = proxied
    first, second = _messages(2)
    broker.enqueue([first, second])
    proxy.drop_next_reply()
    delivery = broker.claim(["default"], WORKER)
    assert proxy.dropped.is_set(), "the proxy never dropped a reply"
    assert delivery is not None and delivery.id == first.id and delivery.deliveries == 1
    assert _counts(direct) == (1, 1)  # the second task still waits: one claim, not two
    assert [d.id for d in broker.held_by(WORKER)] == [first.id]
    assert broker.settle(delivery, Complete())


def test_settle_and_claim_whose_reply_was_lost_is_not_run_twice(
    proxied: tuple[RedisBroker, RedisBroker, ReplyDropper],
) -> None:
    broker, direct, proxy = proxied
    first, second, third = _messages(3)
    broker.enqueue([first])
    running = broker.claim(["default"], WORKER)
    assert running is not None
    broker.enqueue([second, third])
    proxy.drop_next_reply()
    settled, delivery = broker.settle_and_claim(running, Complete(), ["default"], WORKER)
    assert proxy.dropped.is_set(), "the proxy never dropped a reply"
    assert settled is True
    assert delivery is not None and delivery.id == second.id
    assert _counts(direct) == (1, 1)
    # And with nothing left to claim, the lost reply still reports the settle.
    assert broker.settle(delivery, Complete())
    last = broker.claim(["default"], WORKER)
    assert last is not None and last.id == third.id
    proxy.drop_next_reply()
    assert broker.settle_and_claim(last, Complete(), ["default"], WORKER) == (True, None)
    assert _counts(direct) == (0, 0)


def test_a_claim_that_never_reached_the_server_runs_again(
    proxied: tuple[RedisBroker, RedisBroker, ReplyDropper],
) -> None:
    """The lookup finds nothing when the lost call didn't run: the claim is sent again."""
    broker, direct, _ = proxied
    (only,) = _messages(1)
    broker.enqueue([only])
    client = broker._script_conns.get()
    client.disconnect()  # the next send reconnects: nothing was lost, the claim just runs
    delivery = broker.claim(["default"], WORKER)
    assert delivery is not None and delivery.id == only.id
    assert _counts(direct) == (0, 1)
