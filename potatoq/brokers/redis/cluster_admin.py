"""The Redis Cluster broker's calls that look at every queue (cluster.py): one call per
queue slot, the queues listed by the global ``queues`` set; by id (``queued_task``,
``revoke``): every queue's job hash, in one pipeline."""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from potatoq.brokers.base import (
    DeadLetterRecord,
    QueuedTask,
    QueueStats,
    validate_queue_name,
)

from ..history_buffer import HistoryBuffer
from .admin import parse_stats
from .broker import JOB_FIELDS
from .outbox import ClusterParts


class ClusterAdmin(ClusterParts):
    """Inspection and admin across queue slots (mixed into :class:`~.cluster.RedisClusterBroker`)."""

    purge_batch = 1_000  # tasks per purge script call, as RedisAdmin's

    if TYPE_CHECKING:

        def _history_buffer(self) -> HistoryBuffer[Any]: ...
        def _queued(self, task_id: str, values: Sequence[bytes | None]) -> QueuedTask | None: ...
        def _dead_record(
            self, task_id: bytes, score: float, raw: bytes | None, info: bytes | None
        ) -> DeadLetterRecord | None: ...
        def _free_unique(self, queue: str) -> None: ...
        def _unlist_revoked(self, delivery_id: str, headers: Any) -> None: ...
        def _limit_waiters(self, queue: str) -> list[tuple[str, str, str]]: ...
        def _unlist_purged(self, queue: str, waiters: Sequence[tuple[str, str, str]]) -> None: ...
        def _retake_dead(self, queue: str, ids: Sequence[str] | None) -> list[str] | None: ...

    def queued_task(self, task_id: str) -> QueuedTask | None:
        queues = self._queues()
        with self._errors():
            pipe = self._client().pipeline(transaction=False)
            for queue in queues:
                pipe.hmget(f"{self.keys.of_queue(queue)}job:{task_id}", JOB_FIELDS)
            rows = pipe.execute()
        found = (self._queued(task_id, values) for values in rows)
        return next((task for task in found if task is not None), None)

    def revoke(self, task_id: str) -> bool:
        queued = self.queued_task(task_id)
        if queued is None:
            return False
        removed = bool(self._run_at(self.keys.of_queue(queued.queue), "revoke", [task_id]))
        if removed and queued.message is not None:
            if "uq" in queued.message.headers:
                self._free_unique(queued.queue)
            self._unlist_revoked(task_id, queued.message.headers)
        if removed and self.config.history.enabled:
            from potatoq.brokers import history as hist

            name = None if queued.message is None else queued.message.task
            record = hist.for_revoke(task_id, name, queued.queue, time.time(), self.config.history)
            if record is not None:
                self._history_buffer().add(record)
        return removed

    def list_dead(self, limit: int = 100, offset: int = 0) -> list[DeadLetterRecord]:
        oldest = int((time.time() - self.config.dead_letter_ttl) * 1_000_000)
        client = self._client()
        heads: list[tuple[float, str, bytes]] = []
        with self._errors():
            for queue in self._queues():
                dead = f"{self.keys.of_queue(queue)}dead"
                entries = client.zrevrangebyscore(
                    dead, "+inf", oldest, start=0, num=offset + limit, withscores=True
                )
                heads += [(score, queue, task_id) for task_id, score in entries]
            picked = heapq.nlargest(offset + limit, heads)[offset:]
            pipe = client.pipeline(transaction=False)
            for _, queue, task_id in picked:
                pipe.hget(f"{self.keys.of_queue(queue)}dead:payload", task_id)
                pipe.hget(f"{self.keys.of_queue(queue)}dead:info", task_id)
            fields = pipe.execute()
        found = (
            self._dead_record(task_id, score, fields[2 * i], fields[2 * i + 1])
            for i, (score, _, task_id) in enumerate(picked)
        )
        return [record for record in found if record is not None]

    def retry_dead(self, ids: Sequence[str] | None = None) -> int:
        if ids is not None and not ids:
            return 0
        moved = 0
        for queue in self._queues():
            # a unique dead letter goes back only if it takes its key again (cluster_unique.py)
            allowed = self._retake_dead(queue, ids)
            if allowed is not None and not allowed:
                continue
            args = ["1"] if allowed is None else ["0", *allowed]
            moved += int(self._run_at(self.keys.of_queue(queue), "dead_retry", args))
        return moved

    def purge_dead(self) -> int:
        return sum(int(self._run_at(self.keys.of_queue(q), "dead_purge", [])) for q in self._queues())

    def queue_stats(self) -> list[QueueStats]:
        stats = []
        for queue in self._queues():  # each queue slot's own queues set holds that queue
            reply = self._run_at(self.keys.of_queue(queue), "queue_stats", [])
            stats += [row for row in parse_stats(reply) if row.queue == queue]
        return stats

    def purge(self, queues: Sequence[str]) -> int:
        names = [validate_queue_name(q) for q in queues]
        deleted = 0
        for queue in names:  # in batches, as RedisAdmin.purge
            waiters = self._limit_waiters(queue)
            while True:
                batch = int(self._run_at(self.keys.of_queue(queue), "purge", [self.purge_batch, queue]))
                deleted += batch
                if batch < self.purge_batch:
                    break
            self._free_unique(queue)
            self._unlist_purged(queue, waiters)
        return deleted

    def pause_queue(self, queue: str) -> bool:
        validate_queue_name(queue)
        with self._errors():
            paused = bool(self._client().hsetnx(self.keys.paused, queue, repr(time.time())))
            self._client().zadd(self.keys.marker(queue), {"m": 0})
        return paused

    def resume_queue(self, queue: str) -> bool:
        validate_queue_name(queue)
        with self._errors():
            resumed = bool(self._client().hdel(self.keys.paused, queue))
            self._client().zadd(self.keys.marker(queue), {"m": 0})
        return resumed
