"""A worker thread's held history records (history_buffer) belong to the process that
held them: a forked child starts with none, so it never writes (twice) nor loses its
parent's records. The buffers are thread-locals with a fork count (issue 31: a
``ProcessLocal`` lookup made a ``getpid`` system call twice per settle)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from potatoq.brokers.base import BrokerConfig, HistoryRecord
from potatoq.brokers.sqlite import SQLiteBroker


def _record(n: int) -> HistoryRecord:
    return HistoryRecord(
        task_id=f"t{n}", name="tests.fork", queue="default", state="SUCCESS", finished_at=1.0
    )


def test_a_forked_child_starts_with_no_held_records(tmp_path: Path) -> None:
    broker = SQLiteBroker(BrokerConfig(url=f"sqlite:///{tmp_path / 'fork.db'}"))
    try:
        broker._history_buffer().add(_record(1))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report how many records it sees held, then leave at once
            try:
                os.write(write, str(len(broker._history_buffer().records)).encode())
            finally:
                os._exit(0)
        os.close(write)
        seen = os.read(read, 16)
        os.close(read)
        os.waitpid(pid, 0)
        assert seen == b"0"
        assert [r.task_id for r in broker._history_buffer().records] == ["t1"]  # the parent's stay

        others: list[int] = []
        thread = threading.Thread(target=lambda: others.append(len(broker._history_buffer().records)))
        thread.start()
        thread.join()
        assert others == [0]  # and each thread holds its own
    finally:
        broker._history_buffer().take()
        broker.close()
