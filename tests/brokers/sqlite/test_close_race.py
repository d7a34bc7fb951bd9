"""Closing the SQLite broker while other threads use it (an app shutting down while a
request thread or the dashboard's sampler still reads): close() closes every thread's
connection, and closing a sqlite3 connection while another thread runs a statement on it
crashed the interpreter (a segmentation fault: a CI run lost a test process to it). Now a
close waits for the statement; the other thread's next call opens a connection again.

The race runs in a subprocess, so that a crash fails this test instead of the test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

RACE = textwrap.dedent(
    """
    import sqlite3, sys, threading
    from potatoq.brokers import create_broker
    from potatoq.brokers.base import BrokerConfig
    from potatoq.exceptions import OperationalError
    from potatoq.message import Message, new_id

    broker = create_broker(BrokerConfig(url="sqlite:///" + sys.argv[1]))
    broker.enqueue([Message(id=new_id(), task="tests.noop", queue="q")])
    reads = 0
    refused = []
    cond = threading.Condition()
    stop = threading.Event()

    def reader():
        global reads
        while not stop.is_set():
            try:
                broker.queue_stats()
            except sqlite3.ProgrammingError as exc:  # used between a close and its reopen
                refused.append(str(exc))
            with cond:
                reads += 1
                cond.notify_all()

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for _ in range(1000):
        with cond:  # each close lands while the readers read
            seen = reads
            cond.wait_for(lambda: reads >= seen + 2, timeout=30)
        broker.close()
    stop.set()
    for thread in threads:
        thread.join()
    assert broker.queue_stats()[0].waiting == 1  # still usable after all those closes
    broker.close()
    assert all("closed database" in text for text in refused), refused
    print("reads", reads, "refused", len(refused))
    """
)


def test_closing_the_broker_while_other_threads_read_never_crashes(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", RACE, str(tmp_path / "race.sqlite3")],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, f"exit {run.returncode}:\n{run.stderr[-3000:]}"
    assert run.stdout.startswith("reads "), run.stdout
