"""Pausing queues on the Redis broker: one hash ``paused`` of queue -> since (epoch seconds).

Single commands (HSETNX, HDEL, HGETALL) are atomic on their own, so no script is needed;
the claim script is unchanged: workers leave paused queues out of the keys they pass it.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from potatoq.brokers.base import Broker, validate_queue_name

if TYPE_CHECKING:
    import redis

    from .keys import Keys


class RedisPause(Broker):
    """``pause_queue`` / ``resume_queue`` / ``paused_queues`` (mixed into :class:`RedisBroker`)."""

    if TYPE_CHECKING:
        keys: Keys

        def _client(self) -> redis.Redis[bytes]: ...
        def _errors(self) -> contextlib.AbstractContextManager[None]: ...

    def pause_queue(self, queue: str) -> bool:
        validate_queue_name(queue)
        with self._errors():
            pipe = self._client().pipeline(transaction=True)
            pipe.hsetnx(self.keys.paused, queue, repr(time.time()))
            self._wake_a_waiter(pipe, queue)
            return bool(pipe.execute()[0])

    def resume_queue(self, queue: str) -> bool:
        validate_queue_name(queue)
        with self._errors():
            pipe = self._client().pipeline(transaction=True)
            pipe.hdel(self.keys.paused, queue)
            self._wake_a_waiter(pipe, queue)
            return bool(pipe.execute()[0])

    def _wake_a_waiter(self, pipe: redis.client.Pipeline[bytes], queue: str) -> None:
        # An idle worker blocks on the queue's marker for up to a minute: arm it (as an
        # enqueue does, see _lib.lua's wake), so a waiter looks at the paused set again now.
        pipe.zadd(self.keys.marker(queue), {"m": 0})

    def paused_queues(self) -> dict[str, float]:
        with self._errors():
            rows: dict[bytes, bytes] = self._client().hgetall(self.keys.paused)
        return {queue.decode(): float(since) for queue, since in sorted(rows.items())}
