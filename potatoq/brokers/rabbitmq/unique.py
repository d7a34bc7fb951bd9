"""Unique tasks on RabbitMQ: the key lives in the result backend (see :mod:`.store`),
because an AMQP queue can't be searched for the task holding it.

* **Taken at publish**: ``enqueue`` runs one store step for the batch's unique messages
  before publishing them: the key (``uq:<key>`` on Redis, a ``potatoq_rmq_unique`` row on
  PostgreSQL and SQLite) is set to the task's id unless another task holds it (two
  producers racing get one task); a duplicate is not published and is marked with the
  holder's id (the app returns the holder's ``AsyncResult``). A key whose holder already
  has a ready result (finished, failed, revoked) is stale and taken over, which also
  covers a process that died between its ack and the release.
* **Released** after the ack of the settle that ends the task (completed, dead-lettered by
  potatoq, or a revoked task skipped at claim), at the claim for keys held only while
  waiting (``states=("waiting", "scheduled")``), and by ``revoke`` (found by the task's
  id). A retry keeps its key; a killed worker's task is delivered again by
  RabbitMQ, still holding it.
* **RabbitMQ's own dead-lettering** (a task that crashed its worker ``max_deliveries``
  times goes to ``<queue>.dlq`` without any potatoq settle): the key is then released by its
  TTL, ``unique_for`` when given, else the ``unique_backstop`` transport option (24 h). A
  TTL rather than a dead-letter consumer, because nothing consumes ``.dlq`` continuously
  (``dead list`` only peeks at it) and the backstop bounds every other way a key could be
  orphaned (a publish that failed after the key was taken, a purged queue).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from potatoq.brokers.base import Broker, Complete, DeadLetter, Delivery, Outcome
from potatoq.brokers.rabbitmq.store import LimitStore, has_store, store_of
from potatoq.brokers.unique import unique_of
from potatoq.message import Message
from potatoq.states import READY_STATES

if TYPE_CHECKING:
    from potatoq.brokers.rabbitmq.options import RabbitMQOptions


class RabbitMQUnique(Broker):
    """Taking and releasing unique keys (mixed into :class:`~.broker.RabbitMQBroker`)."""

    if TYPE_CHECKING:
        backend: Broker | None
        options: RabbitMQOptions

    def _unique_store(self) -> LimitStore:
        return store_of(self.backend, "unique tasks")

    def _take_unique(self, messages: Sequence[Message]) -> list[Message]:
        """Hold the keys of ``messages``' unique ones; returns those to publish (duplicates
        are marked with their holder's id and left out)."""
        unique = [(m, spec) for m in messages if (spec := unique_of(m.headers)) is not None]
        if not unique:
            return list(messages)
        store = self._unique_store()
        stale: dict[str, str] = {}  # key -> finished holder, taken over on the second pass
        duplicates: dict[str, str] = {}  # message id -> holder
        for _ in range(2):
            args: list[str | int] = []
            for message, spec in unique:
                seconds = spec.seconds if spec.seconds is not None else self.options.unique_backstop
                args += [spec.key, message.id, max(1, math.ceil(seconds * 1000)), stale.get(spec.key, "")]
            reply = list(store.run("unique_take", args) or ())
            duplicates = {}
            for i in range(0, len(reply), 2):
                message, spec = unique[int(reply[i]) - 1]
                holder = reply[i + 1]
                duplicates[message.id] = holder.decode() if isinstance(holder, bytes) else str(holder)
            finished = {
                unique[j][1].key: holder
                for j, (message, _spec) in enumerate(unique)
                if (holder := duplicates.get(message.id)) is not None and self._finished(holder)
            }
            if not finished:
                break
            stale = finished
            unique = [(m, s) for m, s in unique if m.id in duplicates]
        for message in messages:
            holder = duplicates.get(message.id)
            if holder is not None:
                message.mark_duplicate(holder)
        return [m for m in messages if m.duplicate_of is None]

    def _finished(self, task_id: str) -> bool:
        record = self.backend.get_result(task_id) if self.backend is not None else None
        return record is not None and record.state in READY_STATES

    def _release_unique(self, task_id: str) -> None:
        self._unique_store().run("unique_release", [task_id])

    def _unique_revoked(self, task_id: str) -> None:
        """``revoke`` frees the key at once (the task itself is skipped when delivered)."""
        if has_store(self.backend):
            self._release_unique(task_id)

    def _unique_ends(self, delivery: Delivery, outcome: Outcome | None) -> None:
        """After an ack: release the key if ``outcome`` ended the task (None: the claim,
        for a key held only while waiting)."""
        message = delivery.message
        spec = unique_of(message.headers) if message is not None else None
        if spec is None:
            return
        if outcome is None and spec.running:
            return
        if outcome is not None and not isinstance(outcome, Complete | DeadLetter):
            return
        self._release_unique(delivery.id)
