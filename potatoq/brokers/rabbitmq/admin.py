"""The RabbitMQ broker's inspection and admin calls: the dead-letter queues (list, retry,
purge, each read without removing or reordering), queue statistics from passive declares,
purging queues and dropping a prefix's queues."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from potatoq.brokers.base import (
    Broker,
    DeadLetterRecord,
    QueueStats,
)
from potatoq.brokers.rabbitmq import declare
from potatoq.brokers.rabbitmq.ops import Op, Publish
from potatoq.brokers.rabbitmq.session import Outgoing, properties_for
from potatoq.brokers.rabbitmq.topology import H_DELIVERIES, H_DIED_AT, H_QUEUE, H_REASON, Topology
from potatoq.brokers.unique import unique_of_raw
from potatoq.exceptions import MessageDecodeError
from potatoq.message import Message

if TYPE_CHECKING:
    from .broker import _ProcessState


class RabbitMQAdmin(Broker):
    """Dead letters, statistics and purges (mixed into :class:`RabbitMQBroker`)."""

    if TYPE_CHECKING:
        topology: Topology

        def _process(self) -> _ProcessState: ...
        def _take_unique(self, messages: Sequence[Message]) -> list[Message]: ...

    # ------------------------------------------------------------------ dead letters

    def _registered(self) -> list[str]:
        state = self._process()
        names: list[str] = state.link.run(declare.registered_queues, state.link, self.topology)
        return names

    def list_dead(self, limit: int = 100, offset: int = 0) -> list[DeadLetterRecord]:
        """Dead letters, newest first. Reads each ``q.dlq`` without removing or reordering
        (see :func:`.declare.read_queue`)."""
        state = self._process()
        records: list[tuple[float, int, DeadLetterRecord]] = []
        for queue in self._registered():
            messages = state.link.run(declare.read_queue, state.link, self.topology.dead_queue(queue))
            for position, message in enumerate(messages):
                record = self._dead_record(queue, message.properties, message.body)
                records.append((record.died_at, position, record))
        records.sort(key=lambda r: (r[0], r[1]), reverse=True)
        return [r[2] for r in records[offset : offset + max(0, limit)]]

    def _dead_record(self, queue: str, properties: Any, body: bytes) -> DeadLetterRecord:
        headers = dict(getattr(properties, "headers", None) or {})
        task: str | None = None
        task_id = getattr(properties, "message_id", None)
        try:
            message = Message.decode(body, max_size=self.config.max_message_size)
            task = message.task
            task_id = task_id or message.id
        except MessageDecodeError:
            pass
        reason = _text(headers.get(H_REASON))
        deliveries = _int(headers.get(H_DELIVERIES))
        died_at = _float(headers.get(H_DIED_AT))
        if not reason:
            cause = _text(headers.get("x-first-death-reason")) or "dead-lettered"
            if cause == "delivery_limit":
                deliveries = self.topology.max_deliveries
                reason = (
                    f"WorkerLostError: delivered {deliveries} times without finishing "
                    "(the queue's x-delivery-limit was reached)"
                )
            else:
                reason = f"dead-lettered by RabbitMQ ({cause})"
        if died_at is None:
            deaths = headers.get("x-death") or []
            when = deaths[0].get("time") if deaths and isinstance(deaths[0], dict) else None
            died_at = when.timestamp() if isinstance(when, dt.datetime) else time.time()
        return DeadLetterRecord(
            id=task_id or "?",
            queue=_text(headers.get(H_QUEUE)) or queue,
            task=task,
            reason=reason,
            raw=bytes(body),
            died_at=died_at,
            deliveries=deliveries or 0,
        )

    def retry_dead(self, ids: Sequence[str] | None = None) -> int:
        state = self._process()
        wanted = None if ids is None else set(ids)
        total = 0
        for queue in self._registered():

            def decide(messages: list[declare.ReadMessage], queue: str = queue) -> Op[None]:
                nonlocal total
                chosen = []
                for message in messages:
                    record = self._dead_record(queue, message.properties, message.body)
                    if (wanted is None or record.id in wanted) and self._takes_key_again(record):
                        chosen.append((message, record))
                items = [self._back_to_queue(record) for _m, record in chosen]
                if items:
                    yield from state.session.publish_all(items)
                for message, _record in chosen:
                    message.ack = True
                total += len(chosen)

            state.link.run(declare.read_queue, state.link, self.topology.dead_queue(queue), decide)
        return total

    def _takes_key_again(self, record: DeadLetterRecord) -> bool:
        """A unique dead letter goes back to its queue only if it can hold its key again
        (another task holding it now keeps it a dead letter, as on the other brokers)."""
        if unique_of_raw(record.raw) is None:
            return True
        try:
            message = Message.decode(record.raw)
        except MessageDecodeError:
            return True
        return bool(self._take_unique([message]))

    def _back_to_queue(self, record: DeadLetterRecord) -> Outgoing:
        priority = 0
        with contextlib.suppress(MessageDecodeError):
            priority = Message.decode(record.raw).priority
        amqp_queue = self.topology.queue_for(record.queue, priority)
        return Outgoing(Publish("", amqp_queue, record.raw, properties_for(record.id)), record.queue, False)

    def purge_dead(self) -> int:
        names = [self.topology.dead_queue(q) for q in self._registered()]
        state = self._process()
        removed: int = state.link.run(declare.purge_queues, state.link, names)
        return removed

    # ------------------------------------------------------------------ stats, purge

    def queue_stats(self) -> list[QueueStats]:
        """Ready messages per queue, from passive declares. RabbitMQ doesn't say which
        cascade messages are for which queue, nor how many are unacked, so ``delayed`` and
        ``running`` are 0 and ``oldest_waiting_age`` is None."""
        state = self._process()
        stats = []
        for queue in self._registered():
            waiting = 0
            for _band, amqp in self.topology.bands_high_first(queue):
                found = state.link.run(declare.queue_exists, state.link, amqp)
                if found is not None:
                    waiting += found[0]
            stats.append(
                QueueStats(queue=queue, waiting=waiting, delayed=0, running=0, oldest_waiting_age=None)
            )
        return stats

    def purge(self, queues: Sequence[str]) -> int:
        """Remove ready tasks of ``queues``; tasks still in the delay cascade stay."""
        names = [amqp for q in queues for _band, amqp in self.topology.bands_high_first(q)]
        state = self._process()
        removed: int = state.link.run(declare.purge_queues, state.link, names)
        return removed

    def drop_all(self) -> int:
        """Delete every queue of this broker's ``queue_prefix`` (for tests and teardown;
        the shared delay cascade stays). Returns how many queues existed."""
        state = self._process()
        names: list[str] = []
        for queue in self._registered():
            names.extend(amqp for _band, amqp in self.topology.bands_high_first(queue))
            names.append(self.topology.dead_queue(queue))
            names.append(self.topology.registered_marker(queue).name)
        names += [self.topology.registry, self.topology.scheduler]
        deleted: int = state.link.run(declare.delete_queues, state.link, names)
        state.session.declared.clear()
        return deleted


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _float(value: Any) -> float | None:
    try:
        return None if value is None else float(_text(value) or "")
    except ValueError:
        return None


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(float(_text(value) or ""))
    except ValueError:
        return None
