"""Unique tasks on the Redis Cluster broker (cluster.py).

A unique key is shared by every queue, so it lives in a slot of its own,
``{<prefix>:u:<key>}``, kept by the RabbitMQ broker's ``unique_take``/``unique_release``
scripts (loaded from their files by :func:`.cluster_limits.limit_scripts`):

* **Taken before the enqueue**: one ``unique_take`` per unique message, in its key's slot:
  ``uq:<key>`` is set to the task's id unless another task holds it (two producers racing
  get one task); a duplicate is not enqueued and is marked with the holder's id. A key
  whose holder has a ready result (finished, failed, revoked) is stale and taken over.
* **Released** when the task leaves its queue for good: the queue slot's scripts that
  remove a task (settle, dead-letter, revoke, purge, a reap's dead letter) append
  ``<id>, <key>`` to the slot's ``uqfree`` list in the same call (``lua/_cluster.lua``,
  ``unique_release``); the caller pops that list right after (:meth:`_free_unique`) and
  releases each key whose task is gone from the queue (a retry in the same queue keeps
  it), and every recovery round pops every queue's list, so a worker that died in between
  leaves nothing behind. A key held only while waiting (``running`` false) is released
  right after the claim that delivered its task. A killed worker's task is put back by the
  reaper, still holding its key.
* **Backstop**: the key's TTL, ``unique_for`` when given, else :data:`UNIQUE_BACKSTOP`,
  for what the release can't reach (a process that died between a take and its enqueue,
  or between popping ``uqfree`` and releasing).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis.exceptions

from potatoq.brokers.base import Delivery
from potatoq.brokers.unique import UniqueSpec, unique_of, unique_of_raw
from potatoq.exceptions import OperationalError
from potatoq.message import Message
from potatoq.states import READY_STATES

from .outbox import ClusterParts

if TYPE_CHECKING:
    from .scripts import Script

log = logging.getLogger("potatoq.brokers.redis")

#: Seconds a unique key without ``unique_for`` is held at most (the backstop).
UNIQUE_BACKSTOP = 86400.0
#: How many ``uqfree`` pairs one pop takes.
FREE_BATCH = 200


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ClusterUnique(ClusterParts):
    """Unique keys in their own slots (mixed into :class:`~.cluster.RedisClusterBroker`)."""

    if TYPE_CHECKING:

        def _eval_at(self, prefix: str, script: Script, args: Sequence[str | bytes | int]) -> Any: ...

    def _unique_prefix(self, key: str) -> str:
        return "{" + self.keys.base + ":u:" + key + "}:"

    def _at_unique(self, key: str, name: str, args: Sequence[str | bytes | int]) -> Any:
        from .cluster_limits import limit_scripts

        return self._eval_at(self._unique_prefix(key), limit_scripts()[name], args)

    def _take_unique(self, messages: Sequence[Message]) -> list[Message]:
        """Hold the keys of ``messages``' unique ones; returns those to enqueue (duplicates
        are marked with their holder's id and left out)."""
        out = []
        for message in messages:
            spec = unique_of(message.headers)
            if spec is None or self._take_one(message, spec):
                out.append(message)
        return out

    def _take_one(self, message: Message, spec: UniqueSpec) -> bool:
        seconds = spec.seconds if spec.seconds is not None else UNIQUE_BACKSTOP
        ttl = max(1, math.ceil(seconds * 1000))
        stale = ""
        for _ in range(2):
            reply = list(self._at_unique(spec.key, "unique_take", [spec.key, message.id, ttl, stale]) or ())
            if not reply:
                return True
            holder = _text(reply[1])
            if stale or not self._finished(holder):
                message.mark_duplicate(holder)
                return False
            stale = holder  # finished, its release lost: taken over on the second pass
        return False  # not reached

    def _finished(self, task_id: str) -> bool:
        record = self.get_result(task_id)
        return record is not None and record.state in READY_STATES

    def _unique_claimed(self, delivery: Delivery) -> None:
        """After a claim: release a key held only while waiting."""
        message = delivery.message
        spec = None if message is None else unique_of(message.headers)
        if spec is not None and not spec.running:
            self._release_unique(spec.key, delivery.id)

    def _release_unique(self, key: str, task_id: str) -> None:
        try:
            self._at_unique(key, "unique_release", [task_id])
        except (OperationalError, redis.exceptions.RedisError) as exc:
            log.warning("releasing unique key %r of %s failed (its TTL will): %r", key, task_id, exc)

    def _free_unique(self, queue: str) -> None:
        """Release the keys of the tasks that left ``queue`` (its ``uqfree`` list), unless
        the task is back in the queue (a retry). A failure leaves the rest of the list to
        the next recovery round (what was popped and not released, to the keys' TTL)."""
        try:
            self._free_unique_of(queue)
        except (OperationalError, redis.exceptions.RedisError) as exc:
            log.warning("releasing the unique keys of queue %r failed (recovery will): %r", queue, exc)

    def _free_unique_of(self, queue: str) -> None:
        prefix = self.keys.of_queue(queue)
        client = self._client()
        while True:
            with self._errors():
                popped = client.lpop(f"{prefix}uqfree", FREE_BATCH) or []
                if not popped:
                    return
                pairs = [(_text(popped[i]), _text(popped[i + 1])) for i in range(0, len(popped) - 1, 2)]
                pipe = client.pipeline(transaction=False)
                for task_id, _key in pairs:
                    pipe.exists(f"{prefix}job:{task_id}")
                present = pipe.execute()
            for (task_id, key), there in zip(pairs, present, strict=True):
                if not there:
                    self._release_unique(key, task_id)
            if len(popped) < FREE_BATCH:
                return

    def _retake_dead(self, queue: str, ids: Sequence[str] | None) -> list[str] | None:
        """The dead letters of ``queue`` that may go back (their unique key taken again),
        or None for "all of them" when none is unique."""
        prefix = self.keys.of_queue(queue)
        with self._errors():
            if ids is None:
                payloads = self._client().hgetall(f"{prefix}dead:payload")
            else:
                values = self._client().hmget(f"{prefix}dead:payload", list(ids)) if ids else []
                payloads = {i: v for i, v in zip(ids, values, strict=True) if v is not None}
        allowed = []
        unique = False
        for task_id, raw in payloads.items():
            spec = unique_of_raw(raw)
            if spec is None:
                allowed.append(_text(task_id))
                continue
            unique = True
            message = Message.decode(raw)
            if self._take_one(message, spec):
                allowed.append(_text(task_id))
        if not unique and ids is None:
            return None
        return allowed
