"""Unique tasks on the database file (``potatoq/brokers/unique.py``, migration 0005).

A unique task's row holds its key (``unique_key``, under a unique partial index), so the
insert itself is the atomic check: the writer lock of the enqueue's transaction (ours, or
the caller's in a transactional enqueue) covers the backstop release, the insert and the
read of the holder. Deleting the row releases the key; a trigger releases it at the start
of a task that holds it only while waiting.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from ...message import Message
from .setup import SQL


def insert_jobs(
    conn: sqlite3.Connection, messages: Sequence[Message], rows: Sequence[Mapping[str, Any]], now: float
) -> None:
    """Insert the rows of ``messages``; a unique message whose key is held by another task
    isn't stored, and :meth:`Message.mark_duplicate` names the holder on it."""
    if all(row["unique_key"] is None for row in rows):
        if len(rows) == 1:
            conn.execute(SQL["job_insert"], rows[0])
        elif rows:
            conn.executemany(SQL["job_insert"], rows)
        return
    for message, row in zip(messages, rows, strict=True):
        key = row["unique_key"]
        if key is None:
            conn.execute(SQL["job_insert"], row)
            continue
        conn.execute(SQL["unique_release_expired"], {"unique_key": key, "now": now})
        if conn.execute(SQL["job_insert"], row).rowcount:
            continue
        holder = conn.execute(SQL["unique_holder"], {"unique_key": key}).fetchone()
        if holder is not None and holder[0] != message.id:
            message.mark_duplicate(str(holder[0]))
