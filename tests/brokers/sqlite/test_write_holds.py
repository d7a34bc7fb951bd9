"""The SQLite broker times its own write transactions and logs a new longest past a bound."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig
from potatoq.brokers.sqlite import SQLiteBroker
from potatoq.exceptions import ImproperlyConfigured
from potatoq.message import Message, new_id


def _broker(path: Path, **options: object) -> SQLiteBroker:
    broker = create_broker(BrokerConfig(url=f"sqlite:///{path}", transport_options=options))
    assert isinstance(broker, SQLiteBroker)
    broker.migrate()
    return broker


def test_the_longest_write_transaction_is_timed_named_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # margins a loaded 2-core machine can't eat: an enqueue would have to stall 0.5 s to log,
    # and 1 s to become the longest
    broker = _broker(tmp_path / "b.sqlite3", slow_write_ms=500)
    broker.enqueue([Message(id=new_id(), task="tests.noop", queue="q")])
    assert broker.write_holds.longest.what == "enqueue"  # the first transaction is the longest so far

    def rebuild_everything() -> None:  # a caller that holds the lock on purpose
        with broker._write(rings=()) as conn:
            conn.execute("SELECT 1")
            time.sleep(1.0)  # the hold being measured, not a wait for an event

    with caplog.at_level(logging.WARNING, logger="potatoq.brokers.sqlite"):
        rebuild_everything()
        broker.enqueue([Message(id=new_id(), task="tests.noop", queue="q")])  # short: no new record
    longest = broker.write_holds.longest
    assert longest.seconds >= 1.0 and longest.what == "rebuild_everything"
    # this logger's records only: a thread another test left running may log meanwhile
    warnings = [r.getMessage() for r in caplog.records if r.name == "potatoq.brokers.sqlite"]
    assert len(warnings) == 1, warnings
    assert "rebuild_everything" in warnings[0] and "slow_write_ms=500" in warnings[0]


def test_a_fast_transaction_under_the_bound_is_not_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = _broker(tmp_path / "b.sqlite3", slow_write_ms=60_000)
    with caplog.at_level(logging.WARNING, logger="potatoq.brokers.sqlite"):
        broker.enqueue([Message(id=new_id(), task="tests.noop", queue="q")])
    assert broker.write_holds.longest.seconds > 0
    assert not [r for r in caplog.records if r.name == "potatoq.brokers.sqlite"]


def test_a_bad_slow_write_ms_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured, match="slow_write_ms"):
        _broker(tmp_path / "b.sqlite3", slow_write_ms="fast")
