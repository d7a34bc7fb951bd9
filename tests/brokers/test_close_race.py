"""Closing a broker while other threads of the process use it (an app shutting down while
a request thread or the dashboard's sampler still reads). close() closes every thread's
connection from the closing thread:

* SQLite: closing a sqlite3 connection while another thread ran a statement on it
  crashed the interpreter (a segmentation fault: a CI run lost a test process to it);
* PostgreSQL: psycopg's close() frees libpq's connection without the lock its statements
  hold, and the other thread's statement failed with psycopg.InternalError ("received 0
  results from command 'BEGIN'"), outside the errors a caller retries.

Now a close waits for the running statement; the other thread's next call fails as on a
lost connection (OperationalError, or sqlite3's "closed database" between a close and its
reopen) or opens a connection again. The race runs in a subprocess, so that a crash fails
this test instead of the test run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import services
from tests.factories.postgres import drop_schema

ROOT = Path(__file__).resolve().parents[2]

RACE = textwrap.dedent(
    """
    import json, sqlite3, sys, threading
    from potatoq.brokers import create_broker
    from potatoq.brokers.base import BrokerConfig
    from potatoq.exceptions import OperationalError
    from potatoq.message import Message, new_id

    broker = create_broker(BrokerConfig(url=sys.argv[1], transport_options=json.loads(sys.argv[2])))
    broker.enqueue([Message(id=new_id(), task="tests.noop", queue="q")])
    reads = 0
    unexpected = []
    cond = threading.Condition()
    stop = threading.Event()

    def reader():
        global reads
        while not stop.is_set():
            try:
                broker.queue_stats()
            except OperationalError:
                pass
            except sqlite3.ProgrammingError as exc:
                if "closed database" not in str(exc):
                    unexpected.append(repr(exc))
            except Exception as exc:
                unexpected.append(repr(exc))
            with cond:
                reads += 1
                cond.notify_all()

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for _ in range(int(sys.argv[3])):
        with cond:  # each close lands while the readers read
            seen = reads
            cond.wait_for(lambda: reads >= seen + 2, timeout=30)
        broker.close()
    stop.set()
    for thread in threads:
        thread.join()
    stats = {s.queue: s.waiting for s in broker.queue_stats()}
    assert stats.get("q") == 1, stats  # still usable after all those closes
    broker.close()
    assert not unexpected, unexpected[:5]
    print("reads", reads)
    """
)


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str], int]]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'race.sqlite3'}", {}, 1000
        return
    url = services.require("postgres")
    schema = f"pq_race_{uuid.uuid4().hex[:10]}"
    try:
        yield url, {"schema": schema}, 300
    finally:
        drop_schema(url, schema)


def test_closing_the_broker_while_other_threads_read_is_clean(
    target: tuple[str, dict[str, str], int],
) -> None:
    url, options, closes = target
    run = subprocess.run(
        [sys.executable, "-c", RACE, url, json.dumps(options), str(closes)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, f"exit {run.returncode}:\n{run.stderr[-3000:]}"
    assert run.stdout.startswith("reads "), run.stdout
