"""Unique tasks on Redis (``potatoq/brokers/unique.py``): ``uq:<key>`` holds the id of the
task holding the key, checked and set inside the enqueue script (``lua/_lib.lua``,
``enqueue_one``), so two producers racing get one task. The key counts as held only while
that task's job hash exists (and, for a key released at start, while it isn't running), and
every script that removes a task (settle, dead-letter, revoke, purge) deletes it, so a
killed worker's task, put back by the reaper, still holds it; ``unique_for`` is its PX."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...message import Message


def mark_duplicates(messages: Sequence[Message], replies: Sequence[Any], batch: int) -> None:
    """Name the holder on each message that ``enqueue.lua`` reported as a duplicate: its
    replies (one per call of ``batch`` messages) are ``[index from 1, holder id, ...]``."""
    for call, reply in enumerate(replies):
        if isinstance(reply, BaseException):
            raise reply
        pairs = list(reply or ())
        for i in range(0, len(pairs), 2):
            holder = pairs[i + 1]
            message = messages[call * batch + int(pairs[i]) - 1]
            message.mark_duplicate(holder.decode() if isinstance(holder, bytes) else str(holder))
