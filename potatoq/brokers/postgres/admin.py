"""The PostgreSQL broker's inspection and admin calls: a queued task by id, revocation, the
dead-letter table (list, retry, purge), queue statistics and purging a queue."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from .. import estimates
from ..base import (
    Broker,
    DeadLetterRecord,
    QueuedTask,
    QueueStats,
    decode_queued,
)
from . import statements
from .options import PostgresOptions


class PostgresAdmin(Broker):
    """Inspection and admin on the broker's tables (mixed into :class:`PostgresBroker`)."""

    if TYPE_CHECKING:
        options: PostgresOptions
        _dead_ttl: float
        _channel_prefix: str

        def _run(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]: ...
        def _statements(self) -> statements.Statements: ...
        def _connection(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]: ...
        def _queues(self, queues: Sequence[str]) -> list[str]: ...
        def _revoke_recorded(self, task_id: str, now: float) -> bool: ...

    def queued_task(self, task_id: str) -> QueuedTask | None:
        rows = self._run("job_find", {"id": task_id})
        if not rows:
            return None
        _, queue, state, priority, due, deliveries, payload = rows[0]
        return decode_queued(
            id=task_id,
            queue=queue,
            # The states are the literals of the jobs table: 0 scheduled, 1 ready, 2 running.
            state=("scheduled", "ready", "running")[state],
            priority=priority,
            due=due,
            deliveries=deliveries,
            raw=bytes(payload),
            max_size=self.config.max_message_size,
        )

    # -- revocation, dead letters, stats --------------------------------------------------

    def revoke(self, task_id: str) -> bool:
        if self.config.history.enabled:  # task history (issue 31)
            return self._revoke_recorded(task_id, time.time())
        return bool(self._run("job_revoke", {"id": task_id}))

    def list_dead(self, limit: int = 100, offset: int = 0) -> list[DeadLetterRecord]:
        params = {"limit": max(0, int(limit)), "offset": max(0, int(offset)), "ttl": self._dead_ttl}
        rows = self._run("dead_list", params)
        return [
            DeadLetterRecord(
                id=task_id,
                queue=queue,
                task=task,
                reason=reason,
                raw=bytes(payload),
                died_at=died_at,
                deliveries=deliveries,
            )
            for task_id, queue, task, reason, payload, died_at, deliveries in rows
        ]

    def retry_dead(self, ids: Sequence[str] | None = None) -> int:
        params = {
            "all": ids is None,
            "ids": list(ids or ()),
            "ttl": self._dead_ttl,
            "channel_prefix": self._channel_prefix,
            "notify": self.options.notify,
        }
        rows = self._run("dead_retry", params)
        return statements.first_int(rows[0] if rows else None)

    def purge_dead(self) -> int:
        stmt = self._statements()["dead_purge"]
        with self._connection() as conn:
            return conn.execute(stmt.query).rowcount

    stats_exact_cap = estimates.EXACT_CAP  # per queue and kind; above it, an estimate
    stats_sample_rows = estimates.SAMPLE_ROWS  # index entries an estimate aims to read
    stats_sample_windows = estimates.SAMPLE_WINDOWS  # ... in this many windows of seq

    def queue_stats(self) -> list[QueueStats]:
        stmts = self._statements()
        cap = int(self.stats_exact_cap)
        read: list[tuple[estimates.Counts, int, float | None]] = []
        with self._connection() as conn, conn.transaction():
            conn.execute(stmts["queue_stats_settings"].query)
            for queue, ready, parked, scheduled, running, age in conn.execute(
                stmts["stats_counts"].query, {"cap": cap}
            ).fetchall():
                counts = estimates.Counts(queue, cap)
                for kind, counted in (("ready", ready), ("parked", parked), ("scheduled", scheduled)):
                    counts.add(kind, counted)
                read.append((counts, running, None if age is None else max(0.0, age)))
            for counts, _, _ in read:
                sampled = {(counts.queue, k): self._estimate(conn, counts.queue, k) for k in counts.capped}
                counts.estimate(sampled)
        return [
            counts.stats(("ready", "parked"), ("scheduled",), running, age) for counts, running, age in read
        ]

    def _estimate(self, conn: psycopg.Connection[Any], queue: str, kind: str) -> float:
        """How many ``kind`` tasks ``queue`` holds, from windows of seq in its index entries."""
        stmts = self._statements()
        row = conn.execute(stmts[f"stats_range_{kind}"].query, {"queue": queue}).fetchone()
        if row is None or row[1] is None:
            return 0.0  # none left since they were counted
        priorities, low, high = row

        def count(starts: list[int], width: int) -> list[int]:
            params = {"queue": queue, "priorities": priorities, "starts": starts, "width": width}
            return [int(n) for (n,) in conn.execute(stmts[f"stats_windows_{kind}"].query, params)]

        # a window of the ready line is one index range per priority: as many descents in all
        windows = max(50, self.stats_sample_windows // max(1, len(priorities or ())))
        return estimates.windowed_estimate(count, int(low), int(high), windows, self.stats_sample_rows)

    purge_batch = 10_000  # rows per transaction

    def purge(self, queues: Sequence[str]) -> int:
        """Delete in batches of :attr:`purge_batch`, each its own transaction: a
        million-task purge never holds a million row locks or one huge transaction."""
        names = self._queues(queues)
        stmt = self._statements()["jobs_purge"]
        deleted = 0
        while True:
            with self._connection() as conn:
                batch = conn.execute(stmt.query, {"queues": names, "batch": self.purge_batch}).rowcount
            deleted += batch
            if batch < self.purge_batch:
                return deleted
