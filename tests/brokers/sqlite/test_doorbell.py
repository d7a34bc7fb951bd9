"""The SQLite doorbell: potatoq's commits wake the threads of any process waiting on the
queues they concern; commits to other queues and other programs' commits don't (those are
what the pause and the slow fallback poll are for)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, WorkerInfo
from potatoq.brokers.sqlite import SQLiteBroker
from potatoq.brokers.sqlite.doorbell import Doorbell, supported
from potatoq.message import Message, new_id

pytestmark = pytest.mark.skipif(not supported(), reason="the doorbell is Linux-only (abstract sockets)")

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "broker.sqlite3"


@pytest.fixture
def broker(db_path: Path) -> Iterator[SQLiteBroker]:
    made = create_broker(BrokerConfig(url=f"sqlite:///{db_path}"))
    assert isinstance(made, SQLiteBroker)
    made.migrate()
    yield made
    made.close()


def msg(queue: str = "default") -> Message:
    return Message(id=new_id(), task="tests.noop", queue=queue)


def test_an_enqueue_in_another_process_rings_a_listener(broker: SQLiteBroker, db_path: Path) -> None:
    listener = Doorbell(str(db_path)).listener()
    listener.announce(("default",))
    listener.listening(True)
    try:
        code = (
            "from potatoq.brokers import create_broker; from potatoq.brokers.base import BrokerConfig;"
            "from potatoq.message import Message, new_id;"
            f"b = create_broker(BrokerConfig(url='sqlite:///{db_path}'));"
            "b.enqueue([Message(id=new_id(), task='t', queue='default')]); b.close()"
        )
        subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        # the ring is sent before enqueue() returns: it is in the socket already
        assert listener.wait(0)
    finally:
        listener.close()


def test_another_programs_commit_does_not_ring(broker: SQLiteBroker, db_path: Path) -> None:
    listener = Doorbell(str(db_path)).listener()
    listener.announce(("default",))
    listener.listening(True)
    try:
        with sqlite3.connect(db_path) as conn:
            conn.execute("CREATE TABLE unrelated (x)")
            for i in range(50):
                conn.execute("INSERT INTO unrelated VALUES (?)", (i,))
                conn.commit()
        assert not listener.wait(0)
        broker.enqueue([msg()])  # and potatoq's does, on the same file
        assert listener.wait(0)
    finally:
        listener.close()


def test_only_commits_for_its_queues_ring_a_listener(broker: SQLiteBroker, db_path: Path) -> None:
    listener = Doorbell(str(db_path)).listener()
    listener.announce(("a", "b"))
    listener.listening(True)
    try:
        broker.enqueue([msg("elsewhere")])
        broker.heartbeat(
            WorkerInfo(node="n", hostname="h", pid=1, queues=("b",), concurrency=1, started_at=0.0)
        )
        assert not listener.wait(0)
        broker.enqueue([msg("b")])
        assert listener.wait(0)
        listener.announce(("elsewhere",))  # a new marker: ringers list the directory again
        listener.listening(True)
        broker.enqueue([msg("b")])
        assert not listener.wait(0)
        broker.enqueue([msg("elsewhere")])
        assert listener.wait(0)
        listener.listening(False)  # busy running a task: enqueues don't ring it
        broker.enqueue([msg("elsewhere")])
        assert not listener.wait(0)
    finally:
        listener.close()


def test_a_waiting_threads_socket_is_announced_until_its_connection_closes(
    broker: SQLiteBroker, db_path: Path
) -> None:
    producer = create_broker(BrokerConfig(url=f"sqlite:///{db_path}"))
    wake_dir = Path(f"{db_path}-potatoq-wake")
    try:
        waiting = threading.Event()

        def wait() -> None:
            waiting.set()
            broker.wait(["default"], 120.0)

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        waiting.wait()
        producer.enqueue([msg()])
        thread.join(60)
        assert not thread.is_alive()
        assert len(list(wake_dir.iterdir())) == 1  # the waiter's marker (the producer never waited)
    finally:
        producer.close()
    broker.close()
    assert not list(wake_dir.iterdir()), "closing the broker removes its threads' markers"


def test_a_dead_process_marker_is_removed_by_the_next_ring(broker: SQLiteBroker, db_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
    )
    dead_pid = int(proc.stdout)
    wake_dir = Path(f"{db_path}-potatoq-wake")
    wake_dir.mkdir(exist_ok=True)
    stale = wake_dir / f"{dead_pid}-1-00000000~1"
    stale.touch()
    broker.enqueue([msg()])
    assert not stale.exists()
