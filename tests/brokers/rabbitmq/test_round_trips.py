"""Round trips a RabbitMQ worker makes per task, beyond the task's own publishes and ack:
one revocation read (at claim; the worker's check just before running reuses it), and a
kill-tombstone probe only for a copy RabbitMQ returned, in one ``queue.delete``.

Against the real RabbitMQ 4 (``POTATOQ_TEST_RABBITMQ_URL``), as ``test_broker.py``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from potatoq import serialization
from potatoq.brokers.base import Complete, Delivery, Requeue
from potatoq.brokers.rabbitmq import backed

from .test_broker import Rabbit, _count_calls, child, claim_soon, msg, nothing_claimable


@pytest.fixture
def rabbit(tmp_path: Path) -> Iterator[Rabbit]:
    maker = Rabbit(tmp_path)
    yield maker
    maker.close()


def _count_backend_reads(broker: Any) -> Callable[[], int]:
    """Count the result backend's get_result calls from now on."""
    backend = broker.backend
    calls = [0]
    original = backend.get_result

    def counting(task_id: str) -> Any:
        calls[0] += 1
        return original(task_id)

    backend.get_result = counting
    return lambda: calls[0]


def test_the_check_before_running_reuses_the_claims_revocation_read(rabbit: Rabbit) -> None:
    broker = rabbit()
    sent = [msg() for _ in range(3)]
    broker.enqueue(sent)
    reads = _count_backend_reads(broker)
    for _ in sent:
        delivery = claim_soon(broker, ["default"])
        assert broker.is_revoked(delivery.id) is False  # what the executor asks before running
        assert broker.settle(delivery, Complete())
    assert reads() == len(sent), "one result-backend read per task, at claim"
    # Only once: a second question (or one about a task this process didn't claim) reads.
    assert broker.is_revoked(sent[0].id) is False
    assert reads() == len(sent) + 1


def test_a_revoke_after_the_claim_is_still_seen_when_the_read_is_stale(
    rabbit: Rabbit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task held back after its claim (a rate limit's wait) is read again before it runs."""
    monkeypatch.setattr(backed, "NOT_REVOKED_FRESH", 0.0)
    broker = rabbit()
    sent = msg()
    broker.enqueue([sent])
    delivery = claim_soon(broker, ["default"])
    assert broker.revoke(sent.id) is True
    assert broker.is_revoked(delivery.id) is True
    assert broker.settle(delivery, Complete())


def test_first_deliveries_and_graceful_requeues_make_no_tombstone_probe(rabbit: Rabbit) -> None:
    """Only a copy RabbitMQ itself returned can have a tombstone: a graceful requeue's
    re-published copy is a new message (its earlier deliveries in a header), not probed."""
    broker = rabbit()
    link = broker._process().link
    crashed = msg()
    broker.enqueue([crashed])  # declares the queue (on channels of its own)
    assert broker.settle(claim_soon(broker, ["default"]), Requeue(crashed=True))
    returned = claim_soon(broker, ["default"])  # probed: RabbitMQ returned it
    assert broker.settle(returned, Requeue(crashed=False))  # re-published, its count kept
    broker.enqueue([msg() for _ in range(2)])
    probes = _count_calls(broker, "_killed_op")
    opened = _count_calls(link, "open_channel")
    seen = {}
    for _ in range(3):
        delivery = claim_soon(broker, ["default"])
        seen[delivery.id] = delivery.deliveries
        assert broker.settle(delivery, Complete())
    assert seen[crashed.id] == 2
    assert probes() == 0
    assert opened() == 0, "a claim or settle opened a channel"


def test_a_returned_copy_is_probed_in_one_round_trip_without_a_channel_of_its_own(rabbit: Rabbit) -> None:
    """A copy RabbitMQ returned (here: a requeue counted as a crash) is probed for a
    tombstone with one queue.delete on the admin channel, and runs when there is none."""
    broker = rabbit()
    link = broker._process().link
    sent = msg()
    broker.enqueue([sent])
    delivery = claim_soon(broker, ["default"])
    assert broker.settle(delivery, Requeue(crashed=True))
    probes = _count_calls(broker, "_killed_op")
    opened = _count_calls(link, "open_channel")
    again = claim_soon(broker, ["default"])
    assert (again.id, again.deliveries) == (sent.id, 2)
    assert (probes(), opened()) == (1, 0)
    assert broker.settle(again, Complete())


@pytest.mark.parametrize("reason", [None, "TimeLimitExceeded: hard time limit (1 s) exceeded"])
def test_the_tombstone_count_says_what_to_do_with_the_returned_copy(
    rabbit: Rabbit, reason: str | None
) -> None:
    supervisor = rabbit()
    sent = msg()
    supervisor.enqueue([sent])
    process = child("claim-and-hold", rabbit.child_config())
    try:
        assert process.stdout is not None
        delivery = Delivery.from_json(serialization.loads(process.stdout.readline()))
        supervisor.prepare_kill(delivery, reason)
        name = supervisor.topology.killed(delivery.id, delivery.deliveries)
        assert _ready(supervisor, name) == (2 if reason is None else 1)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
    worker = rabbit()
    if reason is None:  # requeued uncounted
        again = claim_soon(worker, ["default"])
        assert (again.id, again.deliveries) == (sent.id, 1)
        assert worker.settle(again, Complete())
    else:  # dropped: dead-lettered by the supervisor already
        assert nothing_claimable(worker, ["default"])
        assert [d.id for d in worker.list_dead()] == [sent.id]
    assert _ready(supervisor, name) is None, "the tombstone was consumed"


def _ready(broker: Any, name: str) -> int | None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.config.url))
    try:
        return int(connection.channel().queue_declare(name, passive=True).method.message_count)
    except pika.exceptions.ChannelClosedByBroker:
        return None
    finally:
        if connection.is_open:
            connection.close()
