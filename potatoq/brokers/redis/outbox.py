"""The outbox relay of the Redis Cluster broker (cluster.py): what a settle wrote for other
hash slots (results, chord joins, follow-ups; the entry format is in ``lua/_cluster.lua``)
carried out there, idempotently, by the settling worker right after and by recovery rounds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis
import redis.exceptions

from potatoq.brokers.base import Broker, Delivery, Outcome, Requeue, RetryLater
from potatoq.exceptions import OperationalError

if TYPE_CHECKING:
    from .cluster import ClusterKeys
    from .options import RedisOptions

log = logging.getLogger("potatoq.brokers.redis")

# How long a relayed enqueue is remembered (so a second relay of the entry skips it).
RELAY_MARK_MS = 7 * 86400 * 1000


class ClusterParts(Broker):
    """What the cluster broker's mixins (this relay, cluster_admin.py) use of it."""

    if TYPE_CHECKING:
        keys: ClusterKeys
        options: RedisOptions
        _scope: threading.local

        def _client(self) -> Any: ...
        def _errors(self) -> Any: ...  # RedisBroker._errors, a context manager
        def _run_at(self, prefix: str, name: str, args: Sequence[str | bytes | int]) -> Any: ...
        def _queues(self) -> list[str]: ...
        def _register(self, queues: Sequence[str]) -> None: ...


class ClusterOutbox(ClusterParts):
    """The relay (mixed into :class:`~.cluster.RedisClusterBroker`)."""

    def _relay_settled(self, prefix: str, delivery: Delivery, outcome: Outcome) -> None:
        """Relay the outbox entry the settle of ``delivery`` wrote, if it wrote one. The
        settle is done whatever happens here: a relay that fails is left to recovery."""
        if isinstance(outcome, Requeue):
            return
        if isinstance(outcome, RetryLater):
            if outcome.result is None and outcome.message.queue == delivery.queue:
                return
        elif outcome.result is None and outcome.chord is None and not outcome.followups:
            return
        try:
            self._relay(prefix, f"{delivery.id}:{delivery.token}")
        except (OperationalError, redis.exceptions.RedisError) as exc:
            log.warning("relaying the settle of %s failed (a recovery round will): %r", delivery.id, exc)

    def _relay(self, prefix: str, name: str) -> None:
        """Carry out outbox entry ``name`` of the queue slot ``prefix``, then delete it.

        Each operation is idempotent (a result write keeps the newest stamp, a chord join
        records a part once, an enqueue is marked per entry), so an entry relayed twice, by
        its settling worker and by a recovery round, does each thing once."""
        key = f"{prefix}outbox:{name}"
        with self._errors():
            ops = self._client().lrange(key, 0, -1)
        i = 0
        while i < len(ops):
            kind = ops[i]
            if kind == b"r":
                task_id, record, ttl, stamp = ops[i + 1 : i + 5]
                self._run_at(
                    self.keys.of_result(task_id.decode()), "cluster_result", [task_id, record, ttl, stamp]
                )
                i += 5
            elif kind == b"c":
                group, index, size, value, ttl, *callback = ops[i + 1 : i + 11]
                complete, _ = self._run_at(
                    self.keys.of_chord(group.decode()), "cluster_chord_join", [group, index, size, value, ttl]
                )
                if complete and callback[0]:
                    self._relay_enqueue(callback, f"chord:{group.decode()}")
                i += 11
            elif kind == b"e":
                self._relay_enqueue(ops[i + 1 : i + 6], f"{name}:{i}")
                i += 6
            else:
                raise OperationalError(f"unknown outbox operation {kind!r} in {key}")
        with self._errors():
            pipe = self._client().pipeline(transaction=False)
            pipe.delete(key)
            pipe.zrem(f"{prefix}outbox", name)
            pipe.execute()

    def _relay_enqueue(self, fields: Sequence[bytes], mark: str) -> None:
        queue = fields[1].decode()
        self._register([queue])
        self._run_at(self.keys.of_queue(queue), "cluster_relay_enqueue", [mark, str(RELAY_MARK_MS), *fields])

    def relay_outboxes(self, older_than: float = 0.0) -> int:
        """Relay every outbox entry written more than ``older_than`` seconds ago (a settling
        worker that died before its relay); how many were relayed."""
        relayed = 0
        client = self._client()
        for queue in self._queues():
            prefix = self.keys.of_queue(queue)
            with self._errors():
                cutoff = client.execute_command("TIME", target_nodes=client.get_node_from_key(prefix))
                now_ms = int(cutoff[0]) * 1000 + int(cutoff[1]) // 1000
                names = client.zrangebyscore(f"{prefix}outbox", "-inf", now_ms - int(older_than * 1000))
            for name in names:
                self._relay(prefix, name.decode())
                relayed += 1
        return relayed

    def relay_outboxes_of(self, prefix: str, suffix: str = "") -> None:
        with self._errors():
            names = self._client().zrange(f"{prefix}outbox", 0, -1)
        for name in names:
            if name.decode().endswith(suffix):
                self._relay(prefix, name.decode())
