"""What only the RabbitMQ broker promises: the 4.0 floor, delivery limits and dead-letter
queues, the delay cascade, confirms, fencing across channel loss, heartbeats while a task
runs, priority bands, the scheduler token and the supervisor's kill tombstones.

Everything runs against the real RabbitMQ 4 (``POTATOQ_TEST_RABBITMQ_URL``), each test
under its own queue prefix, deleted afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from potatoq import serialization
from potatoq.brokers import create_broker
from potatoq.brokers.base import (
    BrokerConfig,
    ChordJoin,
    Complete,
    DeadLetter,
    Delivery,
    Requeue,
    ResultRecord,
    RetryLater,
    WorkerInfo,
    WorkerRef,
)
from potatoq.brokers.rabbitmq import RabbitMQBroker, delay
from potatoq.exceptions import ImproperlyConfigured, InvalidName
from potatoq.message import Message
from potatoq.states import FAILURE, SUCCESS
from tests import services

WORKER = WorkerRef("node-r", 7)
ROOT = Path(__file__).resolve().parents[3]
OLD_SERVER = os.environ.get("POTATOQ_TEST_RABBITMQ3_URL", "amqp://guest:guest@127.0.0.1:5672/")


def msg(queue: str = "default", **kw: Any) -> Message:
    return Message(id=kw.pop("id", None) or str(uuid.uuid4()), task="tests.noop", queue=queue, **kw)


class Rabbit:
    """Makes brokers sharing one queue prefix; deletes the prefix's queues at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.url = services.require("rabbitmq")
        self.prefix = f"r{uuid.uuid4().hex[:10]}_"
        self.tmp_path = tmp_path
        self.made: list[RabbitMQBroker] = []
        self.backends: list[Any] = []

    def __call__(self, *, results: bool = True, **options: Any) -> RabbitMQBroker:
        config_fields = {
            k: options.pop(k)
            for k in list(options)
            if k in {"max_deliveries", "task_time_limit", "prefetch_multiplier"}
        }
        backend = None
        if results:
            backend = create_broker(BrokerConfig(url=f"sqlite:///{self.tmp_path / 'rb.sqlite3'}"))
            self.backends.append(backend)
        broker = create_broker(
            BrokerConfig(
                url=self.url,
                transport_options={"queue_prefix": self.prefix, **options},
                result_backend=backend,
                **config_fields,
            )
        )
        assert isinstance(broker, RabbitMQBroker)
        self.made.append(broker)
        return broker

    def child_config(self, **extra: Any) -> str:
        return json.dumps({"url": self.url, "prefix": self.prefix, **extra})

    def close(self) -> None:
        if self.made:
            with contextlib.suppress(Exception):
                self.made[0].drop_all()
        for broker in self.made:
            with contextlib.suppress(Exception):
                broker.close()
        for backend in self.backends:
            backend.close()


@pytest.fixture
def rabbit(tmp_path: Path) -> Iterator[Rabbit]:
    maker = Rabbit(tmp_path)
    yield maker
    maker.close()


def claim_soon(broker: RabbitMQBroker, queues: list[str], timeout: float = 15.0) -> Delivery:
    deadline = time.monotonic() + timeout
    while True:
        delivery = broker.claim(queues, WORKER)
        if delivery is not None:
            return delivery
        if time.monotonic() > deadline:
            pytest.fail(f"nothing claimable from {queues} within {timeout} s")
        broker.wait(queues, 0.5)


def nothing_claimable(broker: RabbitMQBroker, queues: list[str]) -> bool:
    broker.wait(queues, 0.2)
    return broker.claim(queues, WORKER) is None


def poll(check: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def child(mode: str, config: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.brokers.rabbitmq.child", mode, config],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def ready_count(broker: RabbitMQBroker, amqp_queue: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(broker.config.url))
    try:
        return int(connection.channel().queue_declare(amqp_queue, passive=True).method.message_count)
    finally:
        connection.close()


# ----------------------------------------------------------------------------- start-up


def test_a_server_older_than_4_0_is_refused_naming_its_version() -> None:
    if services._reachable(OLD_SERVER) is not None:
        pytest.skip(f"no RabbitMQ 3.x at {OLD_SERVER}")
    broker = create_broker(BrokerConfig(url=OLD_SERVER))
    try:
        with pytest.raises(ImproperlyConfigured, match=r"RabbitMQ 3\.\d+\.\d+ .* too old.*4\.0"):
            broker.ping()
        with pytest.raises(ImproperlyConfigured, match="too old"):
            broker.enqueue([msg()])
    finally:
        broker.close()


def test_unknown_transport_option_is_refused_naming_it() -> None:
    with pytest.raises(ImproperlyConfigured, match="'queue_prefx'"):
        create_broker(BrokerConfig(url="amqp://127.0.0.1:1/", transport_options={"queue_prefx": "x"}))


def test_a_prefetch_multiplier_below_1_is_refused_naming_the_setting() -> None:
    url = services.require("rabbitmq")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ImproperlyConfigured, match="worker_prefetch_multiplier must be a whole number"):
            create_broker(BrokerConfig(url=url, prefetch_multiplier=bad))  # type: ignore[arg-type]
    for hold in (0, -1, "soon", True):
        with pytest.raises(ImproperlyConfigured, match="prefetch_hold"):
            create_broker(BrokerConfig(url=url, transport_options={"prefetch_hold": hold}))


def test_prefetch_is_the_multiplier_times_the_slots_and_1_by_default(rabbit: Rabbit) -> None:
    """The app passes worker_prefetch_multiplier only when the project set it (Celery's 4
    is what the setting reads as until then); a worker child tells the broker its slots."""
    from potatoq import Potatoq

    assert Potatoq("p", broker=rabbit.url).broker_config().prefetch_multiplier == 1
    assert (
        Potatoq("p", broker=rabbit.url, worker_prefetch_multiplier=4).broker_config().prefetch_multiplier == 4
    )
    with pytest.raises(ImproperlyConfigured, match="worker_prefetch_multiplier must be a whole number"):
        Potatoq("p", broker=rabbit.url, worker_prefetch_multiplier="many").broker_config()
    broker = rabbit()
    assert broker.prefetch == 1
    broker.serve_slots(3)
    assert broker.prefetch == 3 and broker._process().link.prefetch == 3


def test_queue_names_with_a_dot_are_refused(rabbit: Rabbit) -> None:
    broker = rabbit()
    with pytest.raises(InvalidName, match=r"'a\.b'.*no '\.'"):
        broker.enqueue([msg("a.b")])
    with pytest.raises(InvalidName, match=r"'a\.b'"):
        broker.claim(["a.b"], WORKER)


def test_transactional_enqueue_is_refused(rabbit: Rabbit) -> None:
    with pytest.raises(ImproperlyConfigured, match="transaction"):
        rabbit().enqueue([msg()], connection=object())


# ----------------------------------------------------------------------------- queues


def test_band_queues_are_quorum_queues_with_the_delivery_limit_and_a_dlq(rabbit: Rabbit) -> None:
    broker = rabbit(max_deliveries=3)
    broker.enqueue([msg()])
    topo = broker.topology
    args = {decl.name: decl.arguments for decl in topo.work_queues("default")}
    band = args[topo.band_queue("default", 0)]
    assert band["x-queue-type"] == "quorum"
    assert band["x-delivery-limit"] == 2  # the first delivery has count 0: 3 deliveries in all
    assert band["x-dead-letter-strategy"] == "at-least-once"
    assert band["x-overflow"] == "reject-publish"
    assert band["x-dead-letter-routing-key"] == f"{rabbit.prefix}default.dlq"
    assert band["x-consumer-timeout"] == int((1800 + 300) * 1000)
    # RabbitMQ refuses a redeclare with a different delivery limit: proof it is set.
    connection = pika.BlockingConnection(pika.URLParameters(broker.config.url))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="x-delivery-limit"):
            connection.channel().queue_declare(
                topo.band_queue("default", 0), durable=True, arguments={**band, "x-delivery-limit": 9}
            )
    finally:
        connection.close()
    assert ready_count(broker, f"{rabbit.prefix}default.dlq") == 0


def test_a_poison_task_runs_max_deliveries_times_then_is_dead_lettered_once(rabbit: Rabbit) -> None:
    broker = rabbit(max_deliveries=3)
    poison = msg()
    broker.enqueue([poison])
    runs = []
    for _ in range(6):  # one more process than it takes: the last finds nothing
        process = child("claim-and-die", rabbit.child_config(max_deliveries=3))
        out, _ = process.communicate(timeout=60)
        report = json.loads(out.strip().splitlines()[-1])
        if not report:
            assert process.returncode == 0
            break
        assert process.returncode == -signal.SIGKILL
        runs.append((report["id"], report["deliveries"]))
    assert runs == [(poison.id, 1), (poison.id, 2), (poison.id, 3)]
    [dead] = poll(broker.list_dead, "the dead letter")
    assert dead.id == poison.id
    assert dead.reason.startswith("WorkerLostError")
    assert dead.raw == poison.encode()
    assert dead.deliveries == 3
    assert nothing_claimable(broker, ["default"])


def test_graceful_requeue_keeps_the_crash_count_and_adds_nothing(rabbit: Rabbit) -> None:
    broker = rabbit(max_deliveries=3)
    sent = msg()
    broker.enqueue([sent])
    first = claim_soon(broker, ["default"])
    assert broker.settle(first, Requeue(crashed=True))
    second = claim_soon(broker, ["default"])
    assert second.deliveries == 2
    assert broker.settle(second, Requeue(crashed=False))  # a worker shutting down
    third = claim_soon(broker, ["default"])
    assert (third.id, third.deliveries, third.raw) == (sent.id, 2, sent.encode())
    assert broker.settle(third, Requeue(crashed=True))
    fourth = claim_soon(broker, ["default"])
    assert fourth.deliveries == 3
    assert broker.settle(fourth, Requeue(crashed=True))
    # A fourth delivery would exceed max_deliveries: dead-lettered, never handed out.
    assert nothing_claimable(broker, ["default"])
    [dead] = poll(broker.list_dead, "the dead letter")
    assert dead.id == sent.id and dead.reason.startswith("WorkerLostError")
    record = broker.get_result(sent.id)
    assert record is not None and record.state == FAILURE


def test_an_unroutable_publish_declares_the_queue_and_retries(rabbit: Rabbit) -> None:
    broker = rabbit()
    broker.enqueue([msg("fresh")])
    assert claim_soon(broker, ["fresh"]) is not None
    # Delete the queue behind the broker's back: the next publish comes back unroutable.
    band = broker.topology.band_queue("fresh", 0)
    connection = pika.BlockingConnection(pika.URLParameters(broker.config.url))
    try:
        connection.channel().queue_delete(band)
    finally:
        connection.close()
    again = msg("fresh")
    broker.enqueue([again])
    assert claim_soon(broker, ["fresh"]).id == again.id


def test_bulk_enqueue_waits_once_for_the_whole_batch_of_confirms(rabbit: Rabbit) -> None:
    broker = rabbit()
    broker.enqueue([msg("bulk")])  # declares the queue
    link = broker._process().link
    batches: list[int] = []
    publish = link.publish

    def counting_publish(items: Any) -> Any:
        batches.append(len(items))
        return publish(items)

    link.publish = counting_publish  # type: ignore[method-assign]
    try:
        broker.enqueue([msg("bulk") for _ in range(500)])
    finally:
        link.publish = publish  # type: ignore[method-assign]
    assert batches == [500]
    assert ready_count(broker, broker.topology.band_queue("bulk", 0)) == 501


def test_priority_bands_are_claimed_highest_first_fifo_inside_a_band(rabbit: Rabbit) -> None:
    broker = rabbit()
    sent = [msg(priority=p) for p in (2, -5, 9, 3, 100, 0, 6, 5)]
    broker.enqueue(sent)
    got = [claim_soon(broker, ["default"]) for _ in sent]
    priorities = [d.message.priority for d in got if d.message]
    # bands (0, 3, 6, 9): [9, 100] then [6] then [3, 5] then [2, -5, 0], each in arrival order
    assert priorities == [9, 100, 6, 3, 5, 2, -5, 0]
    for delivery in got:
        assert broker.settle(delivery, Complete())


def test_one_band_means_one_queue_per_potatoq_queue(rabbit: Rabbit) -> None:
    broker = rabbit(priority_bands=[0])
    broker.enqueue([msg(priority=9), msg(priority=0)])
    assert [name for _band, name in broker.topology.bands_high_first("default")] == [
        f"{rabbit.prefix}default"
    ]
    assert ready_count(broker, f"{rabbit.prefix}default") == 2


# ----------------------------------------------------------------------------- delays


def test_delay_routing_key_spells_the_delay_in_binary_then_the_queue() -> None:
    key = delay.routing_key(70, "p_default")
    words = key.split(".")
    assert len(words) == delay.LEVELS + 1 and words[-1] == "p_default"
    assert int("".join(words[:-1]), 2) == 70
    assert delay.entry_exchange(70) == "potatoq.delay.L06"  # 64 + 4 + 2
    assert delay.entry_exchange(1) == "potatoq.delay.L00"
    assert delay.whole_seconds(2.999999) == 3  # a countdown computed just before publishing
    assert delay.whole_seconds(0.2) == 1  # never early
    assert delay.whole_seconds(-5) == 0
    with pytest.raises(ValueError, match="8.5 years"):
        delay.routing_key(delay.MAX_DELAY + 1, "q")


def delays_arrive_on_time(broker: RabbitMQBroker, long_delay: float) -> None:
    """A 3 s and a ``long_delay`` delay and a 10 s retry backoff, all at once: each is
    claimed soon after its eta (the cascade's hops add no drift), never before."""
    now = time.time()
    short, long = msg(eta=now + 3), msg(eta=now + long_delay)
    failing = msg()
    broker.enqueue([short, long, failing])
    first = claim_soon(broker, ["default"])
    assert first.id == failing.id
    retry = failing.replace(retries=1, eta=time.time() + 10)
    assert broker.settle(first, RetryLater(message=retry))
    due = {short.id: short.eta, long.id: long.eta, failing.id: retry.eta}
    arrived: dict[str, float] = {}
    while len(arrived) < 3:
        delivery = claim_soon(broker, ["default"], timeout=long_delay + 20)
        arrived[delivery.id] = time.time()
        assert broker.settle(delivery, Complete())
    for task_id, eta in due.items():
        assert eta is not None
        late = arrived[task_id] - eta
        # never early; the upper bound is generous for a loaded CI machine (a hop that
        # dropped a level would be 2^n seconds late, not a second or two)
        assert 0 <= late <= 2.5, f"{task_id} arrived {late:+.2f} s from its eta"


def test_delays_through_several_levels_of_the_cascade_arrive_on_time(rabbit: Rabbit) -> None:
    """13 s = 8 + 4 + 1: three hops of the cascade (the 70 s version runs in the full suite)."""
    delays_arrive_on_time(rabbit(), 13)


def consumer_timeout_takes_a_held_delivery_back(broker: RabbitMQBroker) -> None:
    """``x-consumer-timeout`` as a queue argument is what RabbitMQ 4.0 honours (checked
    about once a minute); the held delivery can't be settled afterwards."""
    sent = msg("held")
    broker.enqueue([sent])
    held = claim_soon(broker, ["held"])
    link = broker._process().link
    generation = link.generation
    poll(lambda: link.generation != generation, "RabbitMQ to close the channel", timeout=150)
    assert broker.settle(held, Complete()) is False
    again = claim_soon(broker, ["held"])
    assert (again.id, again.deliveries) == (sent.id, 2)
    assert broker.settle(again, Complete())


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("POTATOQ_FAULTS_FULL", "") != "1",
    reason="about 70 s (RabbitMQ checks consumer timeouts once a minute): run with POTATOQ_FAULTS_FULL=1",
)
def test_delays_and_the_consumer_timeout_run_on_rabbitmqs_clock(rabbit: Rabbit) -> None:
    """Two slow behaviours side by side, to pay the wall time (about 70 s) once."""
    errors: list[BaseException] = []
    timeout_broker = rabbit(consumer_timeout=1)  # same prefix, its own queue "held"

    def in_thread() -> None:
        try:
            consumer_timeout_takes_a_held_delivery_back(timeout_broker)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=in_thread)
    thread.start()
    try:
        delays_arrive_on_time(rabbit(), 70)
    finally:
        thread.join(200)
    if errors:
        raise errors[0]


# ----------------------------------------------------------------------------- consuming


def test_a_settle_after_the_channel_was_replaced_is_refused(rabbit: Rabbit) -> None:
    broker = rabbit()
    sent = msg()
    broker.enqueue([sent])
    stale = claim_soon(broker, ["default"])
    link = broker._process().link
    generation = link.generation
    # Provoke a real server-side channel error: ack a delivery tag the channel never had.
    link.call_soon(lambda: link.work.basic_ack(999_999) if link.work else None)
    poll(lambda: link.generation != generation, "the work channel to be replaced")
    assert broker.settle(stale, Complete()) is False
    assert broker.settle(stale, Requeue()) is False
    fresh = claim_soon(broker, ["default"])
    assert (fresh.id, fresh.deliveries) == (sent.id, 2)
    assert fresh.token != stale.token
    assert broker.settle(fresh, Complete())
    assert nothing_claimable(broker, ["default"])


def test_a_settle_after_the_connection_was_lost_is_refused(rabbit: Rabbit) -> None:
    broker = rabbit()
    sent = msg()
    broker.enqueue([sent])
    stale = claim_soon(broker, ["default"])
    link = broker._process().link
    generation = link.generation
    link.call_soon(lambda: link.connection.close() if link.connection else None)  # as if the network broke
    poll(lambda: link.generation != generation and link.is_ready, "the link to reconnect")
    assert broker.settle(stale, Complete()) is False
    fresh = claim_soon(broker, ["default"])
    assert (fresh.id, fresh.deliveries) == (sent.id, 2)
    assert broker.settle(fresh, Complete())


def test_heartbeats_keep_flowing_while_a_task_holds_the_gil(rabbit: Rabbit) -> None:
    broker = rabbit(heartbeat=1)  # RabbitMQ drops the connection after ~2 missed beats
    broker.enqueue([msg()])
    delivery = claim_soon(broker, ["default"])
    generation = broker._process().link.generation
    end = time.monotonic() + 4
    while time.monotonic() < end:  # a CPU-bound task in the claiming thread
        sum(range(10_000))
    assert broker._process().link.generation == generation
    assert broker.settle(delivery, Complete())


def test_wait_wakes_on_a_push_and_consumers_pause_while_a_task_runs(rabbit: Rabbit) -> None:
    broker, producer = rabbit(), rabbit()
    threading.Timer(0.2, lambda: producer.enqueue([msg("b")])).start()
    started = time.monotonic()
    broker.wait(["a", "b"], 10)
    assert time.monotonic() - started < 8
    running = claim_soon(broker, ["a", "b"])
    assert running.queue == "b"
    intake = broker._process().intake
    link = broker._process().link
    # The running task fills its consumer's prefetch; the other consumers still listen, and
    # pause as soon as one of them pushes a delivery while the task runs.
    held = msg("a")
    producer.enqueue([held])
    poll(lambda: link.run(lambda: _consumers(intake)) == 0, "the consumers to pause")
    producer.enqueue([msg("a")])
    # Only the one delivery pushed before the pause waits here: another worker takes the next.
    other = rabbit()
    assert claim_soon(other, ["a"]).id != held.id
    spawns = _count_calls(link, "spawn")
    applied, following = broker.settle_and_claim(running, Complete(), ["a", "b"], WORKER)
    assert applied and following is not None and following.id == held.id
    # After a pause the posted ack runs as the operation that first waits for the cancel-oks.
    poll(lambda: spawns() == 1, "the ack to wait for the cancels")
    assert broker.settle(following, Complete())


def test_pausing_the_consumers_never_counts_a_delivery_for_a_task_that_did_not_run(rabbit: Rabbit) -> None:
    """A process holding a task pauses its consumers (basic.cancel, one per band) when
    another delivery is pushed; the next task it settles is acked while those cancels are
    in flight. pika sends a cancel only after the previous one's cancel-ok, but the ack at
    once: RabbitMQ could process the ack first, hand the freed prefetch slot's next message
    to a consumer whose cancel then arrived, and return it (on 4.0 a return counts as a
    delivery, towards the dead-letter limit) without it ever reaching this process. An ack
    now waits for the cancel-oks. The ack is sent after 0 to 3 follow-ups are confirmed,
    which moves it across the cancels; without the wait, 300 rounds counted deliveries in 5
    runs of 6 (7 to 17 of them), and 500 rounds in 5 of 5."""
    broker = rabbit()
    rounds = 500
    sent = [msg() for _ in range(rounds + 2)]
    broker.enqueue(sent)
    running = claim_soon(broker, ["default"])  # basic.get: held, as a running task
    got = [running]
    for i in range(rounds):
        # The consumers start and push one: two held with a prefetch of 1, so they pause.
        broker.wait(["default"], 10)
        short = claim_soon(broker, ["default"])
        followups = tuple(msg("next") for _ in range(i % 4))
        assert broker.settle(short, Complete(followups=followups))  # acked right after the pause
        got.append(short)
    assert broker.settle(running, Complete())
    last = claim_soon(broker, ["default"])
    assert broker.settle(last, Complete())
    got.append(last)
    assert {d.id for d in got} <= {m.id for m in sent}
    assert broker._process().intake._cancels_sent >= rounds, "a round didn't pause the consumers"
    counted = [d.deliveries for d in got if d.deliveries != 1]
    assert counted == [], f"{len(counted)} of {len(got)} tasks counted as delivered before they ran"


def test_a_busy_worker_is_handed_the_next_task_as_it_settles(rabbit: Rabbit) -> None:
    """settle_and_claim acks, and the ack frees the consumer's prefetch: RabbitMQ pushes the
    band's next message, which the worker gets with no basic.get and no ready counts. With
    nothing to publish, the ack is posted to the I/O thread without waiting for a reply and
    without a barrier round trip: the push after it proves RabbitMQ processed it."""
    broker, producer = rabbit(), rabbit()
    sent = [msg("busy") for _ in range(20)]
    producer.enqueue(sent)
    broker.wait(["busy"], 10)
    delivery = claim_soon(broker, ["busy"])
    got = [delivery.id]
    link = broker._process().link
    gets = _count_calls(link, "get")
    verifies, runs, posts = (_count_calls(link, name) for name in ("verify", "run", "post"))
    spawns = _count_calls(link, "spawn")
    while len(got) < len(sent):
        applied, following = broker.settle_and_claim(delivery, Complete(), ["busy"], WORKER)
        assert applied
        if following is None:
            broker.wait(["busy"], 10)
            following = claim_soon(broker, ["busy"])
        delivery = following
        got.append(delivery.id)
    settled = len(sent) - 1
    assert (verifies(), runs(), posts()) == (0, 0, settled), "hops to the I/O thread per task"
    # The posted ack is a plain call on the I/O thread, not an operation (a generator, a
    # future, the driver): it is on the critical path, RabbitMQ pushes the next task after it.
    assert spawns() == 0, "the ack of a busy worker ran as an operation"
    assert broker.settle(delivery, Complete())
    assert verifies() == 1, "a plain settle (a process may exit next) keeps the ack's barrier"
    assert got == [m.id for m in sent]  # FIFO, one consumer
    assert gets() == 0, "a busy worker fell back to basic.get"
    assert ready_count(broker, broker.topology.queue_for("busy", 0)) == 0


def test_a_busy_worker_with_follow_ups_waits_for_their_confirms_but_not_for_a_barrier(
    rabbit: Rabbit,
) -> None:
    """Follow-ups are published (confirmed) before the ack, in one round trip per task; the
    ack then needs no barrier (the next push proves it), so no passive declare is sent."""
    broker, producer = rabbit(), rabbit()
    sent = [msg("chain") for _ in range(10)]
    producer.enqueue(sent)
    broker.wait(["chain"], 10)
    delivery = claim_soon(broker, ["chain"])
    link = broker._process().link
    verifies, runs, posts = (_count_calls(link, name) for name in ("verify", "run", "post"))
    followups = []
    for _ in range(len(sent)):
        followup = msg("chain-next")
        followups.append(followup.id)
        applied, following = broker.settle_and_claim(
            delivery, Complete(followups=(followup,)), ["chain"], WORKER
        )
        assert applied
        if len(followups) == len(sent):
            break
        if following is None:
            broker.wait(["chain"], 10)
            following = claim_soon(broker, ["chain"])
        delivery = following
    assert (verifies(), runs(), posts()) == (0, len(sent), 0)
    other = rabbit()
    assert [claim_soon(other, ["chain-next"]).id for _ in followups] == followups
    assert ready_count(broker, broker.topology.queue_for("chain", 0)) == 0


def _count_calls(link: Any, name: str) -> Callable[[], int]:
    """Count calls of ``link.<name>`` from now on."""
    calls = [0]
    original = getattr(link, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    setattr(link, name, counting)
    return lambda: calls[0]


def test_interrupt_wakes_a_waiter_even_one_that_started_waiting_later(rabbit: Rabbit) -> None:
    broker = rabbit()
    threading.Timer(0.2, broker.interrupt).start()
    started = time.monotonic()
    broker.wait(["default"], 30)
    assert time.monotonic() - started < 20, "interrupt() didn't wake wait()"
    broker.interrupt()  # before this thread's next wait: that wait returns at once
    started = time.monotonic()
    broker.wait(["default"], 30)
    assert time.monotonic() - started < 20


def _consumers(intake: Any) -> Any:
    return len(intake._consumers)
    yield  # pragma: no cover


def test_revoked_tasks_are_skipped_at_claim(rabbit: Rabbit) -> None:
    broker = rabbit()
    revoked, kept = msg(), msg()
    broker.enqueue([revoked, kept])
    assert broker.revoke(revoked.id) is True
    assert claim_soon(broker, ["default"]).id == kept.id
    assert nothing_claimable(broker, ["default"])
    record = broker.get_result(revoked.id)
    assert record is not None and record.state == "REVOKED"


def test_revoking_a_finished_task_changes_nothing(rabbit: Rabbit) -> None:
    broker = rabbit()
    broker.store_result(ResultRecord(task_id="done", state=SUCCESS, result=1, date_done=time.time()))
    assert broker.revoke("done") is False
    record = broker.get_result("done")
    assert record is not None and record.state == SUCCESS


# ----------------------------------------------------------------------------- dead letters


def test_listing_dead_letters_neither_removes_nor_reorders_them(rabbit: Rabbit) -> None:
    broker = rabbit()
    sent = [msg() for _ in range(3)]
    broker.enqueue(sent)
    for _ in sent:
        delivery = claim_soon(broker, ["default"])
        assert broker.settle(delivery, DeadLetter(reason=f"failed {delivery.id}"))
    dlq = f"{rabbit.prefix}default.dlq"
    poll(lambda: ready_count(broker, dlq) == 3, "three dead letters")
    first = broker.list_dead()
    for _ in range(25):  # more than RabbitMQ's default delivery limit of 20
        assert broker.list_dead() == first
    assert [r.id for r in first] == [m.id for m in reversed(sent)]
    assert ready_count(broker, dlq) == 3
    # The queue itself is still in the original order: retry all, claim in order.
    assert broker.retry_dead() == 3
    assert [claim_soon(broker, ["default"]).id for _ in sent] == [m.id for m in sent]


# ----------------------------------------------------------------------------- periodic leadership


def test_the_scheduler_token_fails_over_when_its_holder_is_sigkilled(rabbit: Rabbit) -> None:
    holder = child("hold-lease", rabbit.child_config())
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "leader"
        broker = rabbit()
        assert broker.scheduler_lease() is False  # now waiting behind the holder
        time.sleep(0.5)
        assert broker.scheduler_lease() is False
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        poll(broker.scheduler_lease, "the token to move to the waiting process")
        # The fire-time record lives in the result backend: the new leader doesn't repeat it.
        fire_time = float(int(time.time()))
        assert broker.claim_fire_time("every-minute", fire_time, None) is True
        assert rabbit().claim_fire_time("every-minute", fire_time, None) is False
        broker.release_scheduler_lease()
        assert broker.scheduler_lease() in (True, False)  # competing again, no error
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)


def test_only_one_of_several_processes_holds_the_token(rabbit: Rabbit) -> None:
    brokers = [rabbit() for _ in range(3)]
    for broker in brokers:
        broker.scheduler_lease()
    poll(lambda: sum(b.scheduler_lease() for b in brokers) == 1, "one leader")
    time.sleep(0.3)
    assert sum(b.scheduler_lease() for b in brokers) == 1
    leader = next(b for b in brokers if b.scheduler_lease())
    leader.close()  # a clean shutdown hands the token on at once
    rest = [b for b in brokers if b is not leader]
    poll(lambda: sum(b.scheduler_lease() for b in rest) == 1, "a new leader")


# ----------------------------------------------------------------------------- hard time limits


def test_a_killed_childs_message_is_dead_lettered_not_run_again(rabbit: Rabbit) -> None:
    supervisor = rabbit()
    sent = msg()
    supervisor.enqueue([sent])
    process = child("claim-and-hold", rabbit.child_config())
    try:
        assert process.stdout is not None
        delivery = Delivery.from_json(serialization.loads(process.stdout.readline()))
        assert delivery.id == sent.id
        reason = "TimeLimitExceeded: hard time limit (1800 s) exceeded"
        supervisor.prepare_kill(delivery, reason)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
    worker = rabbit()
    assert nothing_claimable(worker, ["default"])
    [dead] = poll(worker.list_dead, "the dead letter")
    assert (dead.id, dead.reason, dead.raw) == (sent.id, reason, sent.encode())
    assert nothing_claimable(worker, ["default"])


def test_a_child_killed_at_shutdown_has_its_task_requeued_without_counting(rabbit: Rabbit) -> None:
    supervisor = rabbit()
    sent = msg()
    supervisor.enqueue([sent])
    process = child("claim-and-hold", rabbit.child_config())
    try:
        assert process.stdout is not None
        delivery = Delivery.from_json(serialization.loads(process.stdout.readline()))
        supervisor.prepare_kill(delivery)  # no reason: the grace period ran out
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
    worker = rabbit()
    again = claim_soon(worker, ["default"])
    assert (again.id, again.deliveries, again.raw) == (sent.id, 1, sent.encode())
    assert worker.settle(again, Complete())
    assert worker.list_dead() == []


# ----------------------------------------------------------------------------- without a backend


def test_without_a_result_backend_results_revoke_and_chords_say_what_is_missing(rabbit: Rabbit) -> None:
    broker = rabbit(results=False)
    for call in (
        lambda: broker.get_result("x"),
        lambda: broker.store_result(ResultRecord(task_id="x", state=SUCCESS)),
        lambda: broker.revoke("x"),
        lambda: broker.chord_join(ChordJoin("g", 0, 1, b"v", msg())),
    ):
        with pytest.raises(ImproperlyConfigured, match="result backend"):
            call()
    broker.heartbeat(WorkerInfo("n", "h", 1, ("default",), 1, time.time()))  # nowhere to go: no-op
    assert broker.workers() == []
    assert broker.is_revoked("x") is False
    # Without a store, the leader's memory dedups fire times.
    assert broker.claim_fire_time("tick", 60.0, None) is True
    assert broker.claim_fire_time("tick", 60.0, None) is False
    # Tasks themselves work.
    broker.enqueue([msg()])
    assert broker.settle(claim_soon(broker, ["default"]), Complete())
