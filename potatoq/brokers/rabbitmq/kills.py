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
from potatoq.brokers.rabbitmq.ops import ChannelLost, Op, Publish
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
        self._run(self._prepare_kill_op, decl, [body] * TOMBSTONES[action], letters)

    def _prepare_kill_op(self, decl: Any, bodies: list[bytes], letters: list[Outgoing]) -> Op[None]:
        state = self._process_state_unchecked()
        channel = yield state.link.open_channel()
        try:
            channel = yield from declare.declare_queue(state.link, channel, decl)
        finally:
            declare.close_quietly(channel)
        marks = [
            Outgoing(Publish("", decl.name, body, pika.BasicProperties(delivery_mode=2)), "", delayed=False)
            for body in bodies
        ]
        yield from state.session.publish_all([*letters, *marks])

    def _killed_op(self, task_id: str, deliveries: int) -> Op[str | None]:
        """The action ("drop", "requeue") of the tombstone :meth:`prepare_kill` left for
        this delivery (None: there is none), consumed: one ``queue.delete`` on the admin
        channel, whose reply says how many messages the tombstone held (deleting a queue
        that doesn't exist is not an error on RabbitMQ 4). Called only for a copy that
        RabbitMQ returned (a killed child's), never for a first delivery.
        """
        link = self._process_state_unchecked().link
        name = self.topology.killed(task_id, deliveries)
        admin = link.admin
        own = admin is None or not admin.is_open
        channel = (yield link.open_channel()) if own else admin
        try:
            frame = yield link.rpc(channel.queue_delete, name)
        except ChannelLost as exc:
            if exc.reply_code != declare.NOT_FOUND:
                raise
            return None
        finally:
            if own:
                declare.close_quietly(channel)
        held = int(frame.method.message_count or 0)
        return None if held == 0 else _ACTIONS.get(held, "drop")


#: Messages a tombstone holds for each action: the count, read back from ``queue.delete``,
#: is the action, so the probe of a returned copy is one round trip.
TOMBSTONES = {"drop": 1, "requeue": 2}
_ACTIONS = {count: action for action, count in TOMBSTONES.items()}
