"""What only the memory broker does: state shared by URL name within one process."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, Complete, WorkerRef
from potatoq.brokers.memory import MemoryBroker
from potatoq.message import Message

WORKER = WorkerRef("memory-test", 1)


def memory(name: str | None = None) -> MemoryBroker:
    broker = create_broker(BrokerConfig(url=f"memory://{name or uuid.uuid4().hex}"))
    assert isinstance(broker, MemoryBroker)
    return broker


def msg(queue: str = "default") -> Message:
    return Message(id=str(uuid.uuid4()), task="tests.noop", queue=queue)


def test_instances_with_the_same_name_share_one_queue() -> None:
    name = uuid.uuid4().hex
    app_side, worker_side = memory(name), memory(name)
    sent = msg()
    app_side.enqueue([sent])
    delivery = worker_side.claim(["default"], WORKER)
    assert delivery is not None and delivery.id == sent.id
    assert worker_side.settle(delivery, Complete())


def test_different_names_are_isolated() -> None:
    one, other = memory(), memory()
    one.enqueue([msg()])
    assert other.claim(["default"], WORKER) is None
    assert one.claim(["default"], WORKER) is not None


def test_a_bare_url_is_the_default_store() -> None:
    assert MemoryBroker(BrokerConfig(url="memory:")).name == "default"
    assert MemoryBroker(BrokerConfig(url="memory://")).name == "default"


def test_capabilities_say_it_is_private_and_volatile() -> None:
    caps = MemoryBroker.capabilities
    assert (caps.multiprocess, caps.crash_safe_storage, caps.transactional_enqueue) == (False, False, False)


def test_enqueue_through_a_connection_is_refused() -> None:
    with pytest.raises(TypeError, match="connection"):
        memory().enqueue([msg()], connection=object())


def test_payloads_are_stored_encoded() -> None:
    broker = memory()
    sent = msg()
    broker.enqueue([sent])
    delivery = broker.claim(["default"], WORKER)
    assert delivery is not None and delivery.raw == sent.encode()


def test_interrupt_wakes_a_blocked_wait() -> None:
    broker = memory()
    blocked = threading.Event()

    def interrupter() -> None:
        blocked.wait(10)
        time.sleep(0.05)
        broker.interrupt()

    thread = threading.Thread(target=interrupter)
    thread.start()
    blocked.set()
    started = time.monotonic()
    broker.wait(["default"], 60)
    assert time.monotonic() - started < 45
    thread.join(10)


def test_flush_forgets_everything() -> None:
    broker = memory()
    broker.enqueue([msg()])
    broker.flush()
    assert broker.claim(["default"], WORKER) is None
    assert broker.queue_stats() == []


# Python 3.12+ warns about fork() with threads running, which is exactly the case tested.
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_a_forked_child_gets_a_private_usable_copy() -> None:
    broker = memory()
    broker.enqueue([msg()])
    holding, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with broker._store.lock:  # held while the fork happens
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=hold_the_lock)
    thread.start()
    holding.wait(10)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            child_claim = broker.claim(["default"], WorkerRef("child", os.getpid()))
            code = 0 if child_claim is not None else 2
        finally:
            os._exit(code)
    release.set()
    thread.join(10)
    deadline = time.monotonic() + 15
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the child deadlocked on a lock held at fork time")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    assert broker.claim(["default"], WORKER) is not None, "the child's claim leaked into the parent"
