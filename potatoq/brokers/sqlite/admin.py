"""The SQLite broker's inspection and admin calls: a queued task by id, revocation, the
dead-letter table (list, retry, purge), queue statistics and purging a queue."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import estimates
from ..base import (
    Broker,
    DeadLetterRecord,
    QueuedTask,
    QueueStats,
    decode_queued,
)
from ..limits import concurrency_of_raw, rate_of_raw
from ..unique import unique_columns_raw
from .connection import STATE_NAMES
from .setup import (
    SQL,
)


class SQLiteAdmin(Broker):
    """Inspection and admin on the database file (mixed into :class:`SQLiteBroker`)."""

    if TYPE_CHECKING:
        clock: Callable[[], float]

        def _read(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]: ...
        def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...
        def _queue_list(self, queues: Sequence[str]) -> str: ...
        def _history_revoked_in(self, conn: sqlite3.Connection, task_id: str, now: float) -> None: ...

    def queued_task(self, task_id: str) -> QueuedTask | None:
        rows = self._read("job_find", {"id": task_id})
        if not rows:
            return None
        _, queue, state, priority, run_at, deliveries, payload = rows[0]
        return decode_queued(
            id=task_id,
            queue=queue,
            state=STATE_NAMES.get(state, "scheduled"),
            priority=priority,
            due=run_at,
            deliveries=deliveries,
            raw=payload,
            max_size=self.config.max_message_size,
        )

    # -- revocation, dead letters, stats ------------------------------------------------------

    def revoke(self, task_id: str) -> bool:
        with self._write() as conn:
            self._history_revoked_in(conn, task_id, self.clock())
            return conn.execute(SQL["job_revoke"], {"id": task_id}).rowcount > 0

    def list_dead(self, limit: int = 100, offset: int = 0) -> list[DeadLetterRecord]:
        cutoff = self.clock() - self.config.dead_letter_ttl
        rows = self._read("dead_list", {"cutoff": cutoff, "limit": int(limit), "offset": int(offset)})
        return [
            DeadLetterRecord(
                id=task_id,
                queue=queue,
                task=task,
                reason=reason,
                raw=bytes(payload) if not isinstance(payload, str) else payload.encode(),
                died_at=died_at,
                deliveries=deliveries,
            )
            for task_id, queue, task, reason, payload, died_at, deliveries in rows
        ]

    def retry_dead(self, ids: Sequence[str] | None = None) -> int:
        """Restore the latest death of each id; one whose id is waiting or running again stays."""
        now = self.clock()
        params = {
            "cutoff": now - self.config.dead_letter_ttl,
            "ids": None if ids is None else json.dumps(list(ids)),
        }
        restored = 0
        with self._write() as conn:
            for seq, task_id, queue, task, priority, payload in conn.execute(
                SQL["dead_newest"], params
            ).fetchall():
                job = {"id": task_id, "queue": queue, "task": task, "priority": priority, "payload": payload}
                limit = concurrency_of_raw(payload)  # a retried letter keeps its limit
                job["limit_key"], job["limit_max"] = limit if limit is not None else (None, None)
                rate = rate_of_raw(payload)
                job["rate_key"], job["rate_interval"], job["rate_burst"] = (
                    (rate[0], 1.0 / rate[1], rate[2]) if rate is not None else (None, None, None)
                )
                job.update(unique_columns_raw(payload, now))  # ... and its unique key, if free
                if job["unique_key"] is not None:
                    conn.execute(SQL["unique_release_expired"], {"unique_key": job["unique_key"], "now": now})
                if conn.execute(SQL["dead_restore"], {**job, "now": now}).rowcount == 1:
                    conn.execute(SQL["dead_delete"], {"seq": seq})
                    restored += 1
        return restored

    def purge_dead(self) -> int:
        with self._write() as conn:
            return conn.execute(SQL["dead_purge"]).rowcount

    stats_exact_cap = estimates.EXACT_CAP  # per queue and kind; above it, an estimate

    def queue_stats(self) -> list[QueueStats]:
        now = self.clock()
        cap = int(self.stats_exact_cap)
        read: list[tuple[estimates.Counts, int, float | None]] = []
        for queue, ready, parked, due, later, running, head, first_due in self._read(
            "stats_counts", {"now": now, "cap": cap}
        ):
            counts = estimates.Counts(queue, cap)
            for kind, counted in (("ready", ready), ("parked", parked), ("due", due), ("later", later)):
                counts.add(kind, counted)
            due_since = first_due if first_due is not None and first_due <= now else None
            since = min((t for t in (head, due_since) if t is not None), default=None)
            read.append((counts, running, None if since is None else max(0.0, now - since)))
        if any(counts.capped for counts, _, _ in read):
            sampled = self._sampled_counts(now)
            for counts, _, _ in read:
                counts.estimate(sampled)
        return [
            counts.stats(("ready", "parked", "due"), ("later",), running, oldest)
            for counts, running, oldest in read
        ]

    def _sampled_counts(self, now: float) -> dict[tuple[str, str], float]:
        """Waiting rows per (queue, kind), estimated from windows of the rowid range."""
        low, high = self._read("stats_seq_range")[0]
        if low is None:
            return {}
        starts, width, scale = estimates.sample_windows(int(low), int(high))
        rows = self._read("stats_sample", {"now": now, "starts": json.dumps(starts), "width": width})
        return {(queue, kind): n * scale for queue, kind, n in rows}

    purge_batch = 1_000  # rows per write transaction; the write lock is free between them

    def purge(self, queues: Sequence[str]) -> int:
        """Delete in batches of :attr:`purge_batch`, each its own write transaction, with a
        pause as long as the batch took before the next: a million-task purge never holds
        SQLite's write lock for long, so workers and senders go on meanwhile."""
        names = self._queue_list(queues)
        deleted = 0
        while True:
            start = time.monotonic()
            with self._write() as conn:
                batch = conn.execute(SQL["job_purge"], {"queues": names, "limit": self.purge_batch}).rowcount
            deleted += batch
            if batch < self.purge_batch:
                return deleted
            time.sleep(min(0.05, time.monotonic() - start))
