"""Fenced result writes: a result carries the fence of the claim that produced it, and a
write with a lower fence than the stored result's is refused (compare-and-set).

A broker that keeps results in another store (RabbitMQ) can't make its "is this delivery
still mine?" check and the result write one step, so a worker paused in between could
overwrite the result of the delivery that replaced it. The fence closes that gap: a later
claim of the same task has a higher fence (its claim time, in ms), so the store itself
refuses the late write. The fence travels inside the encoded record, as the key
``fence`` (``ResultRecord.decode`` ignores it), so no result table changes shape.

The same conditional write with ``keep_ready`` (fence ignored) is how ``revoke`` records
REVOKED without ever replacing a result that landed meanwhile.
"""

from __future__ import annotations

from potatoq import serialization

from .records import ResultRecord

__all__ = ["FENCE_KEY", "fenced_payload", "stored_fence"]

#: The key of the encoded record that holds its fence (absent: 0, an unfenced write).
FENCE_KEY = "fence"


def fenced_payload(record: ResultRecord, fence: int) -> bytes:
    """``record.encode()`` with ``fence`` added."""
    body = serialization.loads(record.encode())
    body[FENCE_KEY] = int(fence)
    return serialization.dumps(body, where=f"result of task {record.task_id}").encode()


def stored_fence(payload: bytes | str) -> int:
    """The fence of an encoded record (0: written without one)."""
    try:
        return int(serialization.loads(payload).get(FENCE_KEY) or 0)
    except (ValueError, TypeError, AttributeError):
        return 0
