"""Settles survive a broker outage; stale ones are refused and logged, never applied."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, Complete, ResultRecord, WorkerRef, decode_delivery
from potatoq.exceptions import OperationalError
from potatoq.message import Message, new_id
from potatoq.worker.ipc import (
    PIPE_UNDER,
    CarryBoard,
    EventReader,
    EventWriter,
    SlotBoard,
    Tally,
    parse_start,
    widen_pipe,
)
from potatoq.worker.settling import settle_reliably


@pytest.fixture
def broker(tmp_path):
    broker = create_broker(BrokerConfig(url=f"sqlite:///{tmp_path / 'b.sqlite3'}"))
    yield broker
    broker.close()


class Outage:
    """The real broker, but the first ``failures`` settles fail with ``error``."""

    def __init__(self, broker, failures: int, error: Exception) -> None:
        self.broker = broker
        self.failures = failures
        self.error = error
        self.calls = 0
        self.connection_errors = broker.connection_errors

    def settle(self, delivery, outcome):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.broker.settle(delivery, outcome)


def _claimed(broker):
    message = Message(id=new_id(), task="t.add", args=(1, 2))
    broker.enqueue([message])
    delivery = broker.claim(["default"], WorkerRef("node", os.getpid()))
    assert delivery is not None
    return delivery


def _done(delivery):
    return Complete(result=ResultRecord(task_id=delivery.id, state="SUCCESS", result=3))


def test_settle_is_retried_until_the_broker_answers(broker):
    delivery = _claimed(broker)
    flaky = Outage(broker, failures=3, error=OperationalError("broker restarting"))
    retries, sleeps = [], []
    assert settle_reliably(
        flaky, delivery, _done(delivery), on_retry=lambda: retries.append(1), sleep=sleeps.append
    )
    assert flaky.calls == 4
    assert retries == [1]
    assert sleeps == [0.1, 0.2, 0.4]
    assert broker.get_result(delivery.id).result == 3
    assert sum(s.running for s in broker.queue_stats()) == 0


def test_stale_settle_is_refused_and_logged(broker, caplog):
    stale = _claimed(broker)
    # the holder is declared dead and the task delivered again: the first claim is stale
    assert broker.recover(0.0, 5).requeued == 1
    current = broker.claim(["default"], WorkerRef("other", os.getpid()))
    assert current is not None and current.id == stale.id
    with caplog.at_level(logging.WARNING, logger="potatoq.worker.settle"):
        assert settle_reliably(broker, stale, _done(stale)) is False
    assert "refused" in caplog.text and stale.id in caplog.text
    assert broker.get_result(stale.id) is None
    assert settle_reliably(broker, current, _done(current)) is True


def test_an_outcome_the_broker_cannot_store_is_dead_lettered_instead(broker, caplog):
    delivery = _claimed(broker)
    broken = Outage(broker, failures=1, error=ValueError("can't encode"))
    with caplog.at_level(logging.ERROR, logger="potatoq.worker.settle"):
        assert settle_reliably(broken, delivery, _done(delivery)) is True
    dead = broker.list_dead()
    assert [d.id for d in dead] == [delivery.id]
    assert "settle failed: ValueError: can't encode" in dead[0].reason


def test_child_events_cross_the_pipe_in_whole_lines(broker):
    delivery = _claimed(broker)
    read_fd, write_fd = os.pipe()
    writer, reader = EventWriter(write_fd), EventReader(read_fd)
    writer.start(delivery, 1.5, 2.0, thread=3)
    writer.settling(delivery)
    os.write(write_fd, b'["e", "x"')  # half a line: kept for the next read
    events, eof = reader.read()
    assert [e.kind for e in events] == ["start", "settling"] and not eof
    assert events[0].delivery == delivery
    assert (events[0].soft, events[0].hard, events[0].thread) == (1.5, 2.0, 3)
    os.write(write_fd, b', "y"]\n')
    os.close(write_fd)
    events, eof = reader.read()
    assert [(e.kind, e.task_id, e.token) for e in events] == [("end", "x", "y")] and eof
    os.close(read_fd)


@pytest.mark.parametrize("handle", [None, 7, 'tag "x"'])
def test_child_events_keep_any_task_id_and_the_childs_clock(handle):
    # Task ids are the caller's (apply_async(task_id=...)): quotes, newlines, non-ASCII.
    odd_id = 'a"b\\c\nd\té—' + "\u2028"
    message = Message(id=odd_id, task="t.add", args=(1, 2))
    delivery = decode_delivery(
        id=odd_id,
        queue="default",
        raw=message.encode(),
        token="tok",
        deliveries=2,
        worker=WorkerRef("node\n1", 42),
        handle=handle,
        claimed_at=1234.5,
    )
    read_fd, write_fd = os.pipe()
    writer, reader = EventWriter(write_fd), EventReader(read_fd)
    before = time.monotonic()
    writer.end_and_start(delivery, delivery, None, 3.0, thread=1)
    events, _eof = reader.read()
    assert [(e.kind, e.task_id, e.token) for e in events] == [
        ("end", odd_id, "tok"),
        ("start", odd_id, "tok"),
    ]
    start = events[1]
    assert start.delivery == delivery
    assert (start.soft, start.hard, start.thread) == (None, 3.0, 1)
    # The pipe carries the clock to the microsecond (rounded): allow that much either way.
    assert start.started is not None and before - 1e-6 <= start.started <= time.monotonic() + 1e-6
    os.close(write_fd)
    os.close(read_fd)


def test_a_child_with_a_board_writes_there_and_the_pipe_carries_only_what_needs_it(broker):
    # Where the broker lists what a process holds, a child writes what each thread runs to
    # shared memory; a hard limit under PIPE_UNDER and an id too long for a slot still go
    # down the pipe (the supervisor reads the board only about once a second).
    quiet, short = _claimed(broker), _claimed(broker)
    read_fd, write_fd = os.pipe()
    tally, board = Tally(), SlotBoard(3)
    writer, reader = EventWriter(write_fd, tally, board), EventReader(read_fd)
    before = time.monotonic()
    writer.start(quiet, 1700.0, 1800.0, thread=1)
    ((task_id, token, started, hard),) = board.entries()
    assert (task_id, token, hard) == (quiet.id, quiet.token, 1800.0)
    assert before <= started <= time.monotonic()
    assert board.read(0) is None and board.read(2) is None
    writer.settling(quiet)  # its settle is being retried: the hard limit's clock stops
    assert board.read(1) == (quiet.id, quiet.token, started, None)
    writer.end_and_start(quiet, short, None, PIPE_UNDER / 2, thread=1)
    assert board.entries() == []
    writer.settling(short)
    writer.end(short)
    events, _eof = reader.read()
    assert [(e.kind, e.task_id) for e in events] == [
        ("start", short.id),
        ("settling", short.id),
        ("end", short.id),
    ]
    assert events[0].hard == PIPE_UNDER / 2 and events[0].thread == 1
    assert tally.value == 2  # both counted, on the pipe or not
    long_id = "x" * 300
    odd = decode_delivery(
        id=long_id, queue="default", raw=b"{}", token="t", deliveries=1, worker=WorkerRef("n", 1)
    )
    writer.start(odd, None, None, thread=2)
    writer.end_and_start(odd, quiet, None, None, thread=2)
    assert board.entries() == [(quiet.id, quiet.token, board.entries()[0][2], None)]
    writer.end(quiet)
    assert board.entries() == []
    os.close(write_fd)
    events, eof = reader.read()
    assert [(e.kind, e.task_id) for e in events] == [("start", long_id), ("end", long_id)] and eof
    assert tally.value == 4
    os.close(read_fd)
    tally.close()
    board.close()


def test_the_tally_and_board_a_child_writes_are_read_by_its_parent(broker):
    delivery = _claimed(broker)
    tally, board = Tally(), SlotBoard(4)
    pid = os.fork()
    if pid == 0:  # the child: count from several threads, as a child's slots do
        threads = [threading.Thread(target=lambda: [tally.add() for _ in range(500)]) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        board.set(3, delivery, 12.5, 30.0)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert tally.value == 2000
    assert board.entries() == [(delivery.id, delivery.token, 12.5, 30.0)]
    tally.close()
    board.close()


def _carried(board: CarryBoard, thread: int):
    """The start event in ``thread``'s carry slot, and whether it is settling (or None)."""
    entry = board.read(thread)
    return None if entry is None else (parse_start(entry[0]), entry[1])


def test_a_carry_board_holds_each_threads_delivery_and_the_pipe_only_what_needs_it(broker):
    # Where the broker can't list what a process holds (RabbitMQ), a child writes the whole
    # start line, message included, to its thread's slot: the supervisor decodes the
    # delivery from there. A short hard limit and a message too big for a slot still go
    # down the pipe.
    first, short = _claimed(broker), _claimed(broker)
    read_fd, write_fd = os.pipe()
    widen_pipe(read_fd)  # room for the big message's line: nothing reads until the end
    tally, board = Tally(), CarryBoard(2)
    writer, reader = EventWriter(write_fd, tally, board), EventReader(read_fd)
    before = time.monotonic()
    writer.start(first, 1700.0, 1800.0, thread=1)
    assert board.read(0) is None
    event, settling = _carried(board, 1)
    assert (event.kind, event.key, event.soft, event.hard, event.thread) == (
        "start", (first.id, first.token), 1700.0, 1800.0, 1,
    )  # fmt: skip
    assert before <= event.started <= time.monotonic() and not settling
    carried = event.delivery
    assert (carried.id, carried.raw, carried.deliveries, carried.queue) == (
        first.id, first.raw, first.deliveries, first.queue,
    )  # fmt: skip
    assert carried.message.args == first.message.args
    writer.settling(first)  # its settle is being retried: the flag is up, the line unchanged
    assert _carried(board, 1)[1] is True and _carried(board, 1)[0].key == event.key
    writer.end_and_start(first, short, None, PIPE_UNDER / 2, thread=1)
    assert board.read(1) is None
    writer.end(short)
    big = decode_delivery(
        id="big", queue="default", raw=b'{"pad": "' + b"x" * CarryBoard.SLOT + b'"}', token="t",
        deliveries=1, worker=WorkerRef("n", 1),
    )  # fmt: skip
    writer.start(big, None, None, thread=0)
    assert board.read(0) is None
    writer.end(big)
    os.close(write_fd)
    events, eof = reader.read()
    assert [(e.kind, e.task_id) for e in events] == [
        ("start", short.id), ("end", short.id), ("start", "big"), ("end", "big"),
    ] and eof  # fmt: skip
    assert events[2].delivery.raw == big.raw
    assert tally.value == 3
    os.close(read_fd)
    tally.close()
    board.close()


def test_the_carry_board_a_child_writes_is_read_by_its_parent_after_it_died(broker):
    delivery = _claimed(broker)
    board = CarryBoard(3)
    pid = os.fork()
    if pid == 0:  # the child: a few tasks through slot 2, the last one left running
        writer = EventWriter(os.open(os.devnull, os.O_WRONLY), None, board)
        for _ in range(50):
            writer.start(delivery, None, 30.0, thread=2)
            writer.end(delivery)
        writer.start(delivery, None, 30.0, thread=2)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert board.read(0) is None and board.read(1) is None
    event, settling = _carried(board, 2)
    assert event.key == (delivery.id, delivery.token) and event.hard == 30.0 and not settling
    assert event.delivery.raw == delivery.raw
    board.close()
