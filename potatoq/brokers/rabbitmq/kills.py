"""Hard time limits and killed children on RabbitMQ: the supervisor's kill tombstones,
mixed into :class:`~.broker.RabbitMQBroker`.

Only the channel a delivery came on can ack it, so a supervisor can't settle the task of a
child it kills; it leaves a tombstone for that delivery instead, which the next claim of
the returned copy finds (see :meth:`RabbitMQKills.prepare_kill`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pika

from potatoq import serialization
from potatoq.brokers.base import Broker, Delivery
from potatoq.brokers.rabbitmq import declare
from potatoq.brokers.rabbitmq.ops import Await, Op, Publish
from potatoq.brokers.rabbitmq.session import Outgoing

if TYPE_CHECKING:
    from .topology import Topology


class RabbitMQKills(Broker):
    """``prepare_kill`` and the tombstone probe of a redelivered copy."""

    if TYPE_CHECKING:
        topology: Topology

        def _run(self, op: Any, *args: Any) -> Any: ...
        def _process_state_unchecked(self) -> Any: ...
        def _dead_letter_publish(self, delivery: Delivery, reason: str, now: float) -> Outgoing: ...

    def prepare_kill(self, delivery: Delivery, reason: str | None = None) -> None:
        """Called by a worker supervisor just *before* it SIGKILLs the child holding
        ``delivery``, on the supervisor's own connection (the supervisor can't settle a
        child's delivery: ``capabilities.supervisor_settles`` is False).

        Once the child is dead RabbitMQ returns the message to its queue, counting a
        delivery. This leaves a tombstone for exactly this delivery (task id + delivery
        count), which the next claim of the returned copy finds:

        * ``reason`` given (hard time limit): the message is dead-lettered now, on this
          connection, with ``reason``; the returned copy is dropped when claimed instead of
          running again until the delivery limit;
        * ``reason=None`` (killed at the end of the shutdown grace, or a bystander in the
          same child): the copy goes back to its queue without the kill counting as a
          delivery, like ``Requeue(crashed=False)``.

        If the child finishes before the kill, the tombstone is never used and expires
        after a day (with ``reason``, the dead letter stays: call this only once the kill
        is decided).
        """
        decl = self.topology.killed_queue(delivery.id, delivery.deliveries)
        action = "requeue" if reason is None else "drop"
        body = serialization.dumps({"action": action}, where="kill tombstone").encode()
        letters = [] if reason is None else [self._dead_letter_publish(delivery, reason, time.time())]
        self._run(self._prepare_kill_op, decl, body, letters)

    def _prepare_kill_op(self, decl: Any, body: bytes, letters: list[Outgoing]) -> Op[None]:
        state = self._process_state_unchecked()
        channel = yield state.link.open_channel()
        try:
            channel = yield from declare.declare_queue(state.link, channel, decl)
        finally:
            declare.close_quietly(channel)
        tombstone = Publish("", decl.name, body, pika.BasicProperties(delivery_mode=2))
        yield from state.session.publish_all([*letters, Outgoing(tombstone, "", delayed=False)])

    def _killed_op(self, task_id: str, deliveries: int) -> Op[str | None]:
        """The action ("drop", "requeue") of the tombstone :meth:`prepare_kill` left for
        this delivery (None: there is none), consumed.

        The tombstone is declared (not passively probed: a missing queue would close the
        channel and log an error each time), so a probe that finds none deletes the empty
        queue it just made.
        """
        state = self._process_state_unchecked()
        link = state.link
        decl = self.topology.killed_queue(task_id, deliveries)
        channel = yield link.open_channel()
        try:
            frame = yield link.rpc(channel.queue_declare, decl.name, durable=True, arguments=decl.arguments)
            action: str | None = None
            if frame.method.message_count:
                got = yield Await(
                    channel,
                    lambda resume: channel.basic_get(
                        decl.name, lambda _c, _m, _p, body: resume(body), auto_ack=True
                    ),
                )
                try:
                    action = str(serialization.loads(bytes(got)).get("action") or "drop")
                except (ValueError, AttributeError):
                    action = "drop"
            yield link.rpc(channel.queue_delete, decl.name)
        finally:
            declare.close_quietly(channel)
        return action
