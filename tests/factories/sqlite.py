"""The SQLite broker in the contract suite: a fresh database file per test."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from typing import Any

from potatoq.brokers.base import Broker, BrokerConfig

NAME = "sqlite"
ORDER = 10


def make_config(ctx: Any) -> BrokerConfig:
    return BrokerConfig(url=f"sqlite:///{ctx.tmp_path / 'broker.sqlite3'}")


def inject_raw(broker: Broker, queue: str, raw: bytes) -> str:
    """INSERT a ready row whose payload is ``raw`` as-is (e.g. garbage); returns its id."""
    broker.migrate()
    task_id = f"raw-{time.monotonic_ns()}"
    path = getattr(broker, "path")  # noqa: B009 - SQLiteBroker's database file
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(
            "INSERT INTO potatoq_jobs (id, queue, priority, state, run_at, payload)"
            " VALUES (?, ?, 0, 1, ?, ?)",
            (task_id, queue, time.time(), raw),
        )
    return task_id
