"""Pausing queues on RabbitMQ: the flag lives in the result backend, consumers are cancelled.

RabbitMQ has no place for a fleet-wide flag that every consumer could read, so the paused
set is stored by ``config.result_backend`` (its own ``paused_queues``, on SQLite, PostgreSQL
or Redis). A worker that sees the set change calls :meth:`consume_only`, which cancels this
process's consumers and gives back what they had pushed and nobody claimed (published
again and acked, as at shutdown, so it doesn't count as a delivery); its next ``wait``
subscribes again, to the queues still claimable.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from potatoq.brokers.base import Broker, validate_queue_name


class RabbitMQPause(Broker):
    """``pause_queue`` / ``resume_queue`` / ``paused_queues`` / ``consume_only`` (mixed into
    :class:`RabbitMQBroker`)."""

    if TYPE_CHECKING:
        backend: Broker | None
        _state: Any

        def _backend(self, what: str) -> Broker: ...

    def pause_queue(self, queue: str) -> bool:
        validate_queue_name(queue, allow_dots=False)
        return self._backend("pausing a queue").pause_queue(queue)

    def resume_queue(self, queue: str) -> bool:
        validate_queue_name(queue, allow_dots=False)
        return self._backend("resuming a queue").resume_queue(queue)

    def paused_queues(self) -> dict[str, float]:
        # Without a result backend nothing can have been paused (pause_queue refuses).
        return self.backend.paused_queues() if self.backend is not None else {}

    def consume_only(self, queues: Sequence[str]) -> None:
        for queue in queues:
            validate_queue_name(queue, allow_dots=False)
        state = self._state
        if state is None or state.pid != os.getpid():
            return  # this process consumes nothing yet
        state.link.run(state.intake.stop_consuming_op)
