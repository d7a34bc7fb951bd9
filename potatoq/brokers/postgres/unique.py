"""Unique tasks on PostgreSQL (``potatoq/brokers/unique.py``, migration 0007).

A unique task's row holds its key: ``potatoq_job_unique`` (a BEFORE INSERT trigger) reads
the ``uq`` header into ``unique_key`` under a unique partial index, so the enqueue's
``ON CONFLICT DO NOTHING`` is the atomic check: two producers racing (in their own
transactions or a caller's) get one row, the second waiting for the first to commit or
roll back. Deleting the row releases the key; ``unique_until`` is the backstop.

``job_enqueue`` returns the ids it inserted when a message is unique; each unique message
it didn't insert is then matched to the task holding its key (``unique_holders``). If that
holder finished in between, the message is sent again: it was never stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from ...exceptions import OperationalError
from ...message import Message
from ..unique import unique_of
from .statements import Statement

#: How many times a unique message is sent again when the holder that stopped it finished
#: before its id could be read (each time needs a holder to finish within milliseconds).
ATTEMPTS = 5

Runner = Callable[[str, dict[str, Any]], list[tuple[Any, ...]]]


def any_unique(messages: Sequence[Message]) -> bool:
    return any(unique_of(m.headers) is not None for m in messages)


def run_through(connection: Any, stmt: Statement, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Run ``stmt`` in the caller's open transaction on ``connection``; its rows."""
    # Django's wrapper holds the DB-API connection (None until it connects: then its own
    # cursor(), which takes the same pyformat parameters, does)
    raw = getattr(connection, "connection", None) or connection
    if isinstance(raw, psycopg.Connection):
        with raw.cursor() as cur:
            cur.execute(stmt.query, params)
            return cur.fetchall() if cur.description is not None else []
    if isinstance(raw, psycopg.AsyncConnection):
        raise TypeError(
            "enqueue(connection=...) takes a synchronous connection, not a psycopg AsyncConnection"
        )
    cursor_factory = getattr(raw, "cursor", None)
    if cursor_factory is None:
        raise TypeError(
            "enqueue(connection=...) needs a DB-API connection (psycopg 3 or psycopg 2), "
            f"got {type(connection)!r}"
        )
    cur = cursor_factory()  # psycopg 2 and other pyformat DB-API drivers take the text form
    try:
        cur.execute(stmt.text, params)
        return list(cur.fetchall()) if cur.description is not None else []
    finally:
        cur.close()


def inserted_ids(rows: list[tuple[Any, ...]]) -> set[str]:
    """The ids job_enqueue's row says it inserted (asked for with ``unique``)."""
    return set(rows[0][2] or ()) if rows else set()


def mark_duplicates(
    messages: Sequence[Message],
    inserted: set[str],
    run: Runner,
    resend: Callable[[Sequence[Message]], set[str]],
) -> None:
    """Name the holder on each unique message that wasn't inserted (see the module doc)."""
    todo = [m for m in messages if m.id not in inserted and unique_of(m.headers) is not None]
    for _ in range(ATTEMPTS):
        if not todo:
            return
        keys = {m.id: unique_of(m.headers).key for m in todo}  # type: ignore[union-attr]
        rows = run("unique_holders", {"keys": list(keys.values()), "ids": list(keys)})
        holders = {key: task_id for key, task_id in rows if key is not None}
        existing = {task_id for key, task_id in rows if key is None}
        again = []
        for message in todo:
            holder = holders.get(keys[message.id])
            if holder is not None and holder != message.id:
                message.mark_duplicate(holder)
            elif holder is None and message.id not in existing:
                again.append(message)  # its holder finished in between: it was never stored
        todo = again
        if todo:
            stored = resend(todo)
            todo = [m for m in todo if m.id not in stored]
    if todo:
        raise OperationalError(
            f"unique task {todo[0].id} could be neither stored nor matched to its key's holder"
        )
