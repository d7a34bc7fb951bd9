"""The SQLite broker: the embedded default, ``sqlite:///path/to/file.sqlite3``.

Storage layout (one database file in WAL mode, schema in ``sql/migrations/``):

* ``potatoq_jobs``: the hot table. It only holds tasks that are scheduled (state 0), ready
  (1) or running (2); a finished task's row is deleted. Partial indexes per state keep each
  hot query a short index search: ``(queue, priority DESC, seq) WHERE state = 1`` for
  claims, ``(queue, run_at) WHERE state = 0`` for ETAs (so far-future tasks never slow the
  ready scan), ``(worker, pid) WHERE state = 2`` for recovery. ``seq`` (the rowid) gives
  FIFO order within a priority (renumbered when promotion or a retry makes a task ready);
  ``token`` is a random fencing token set by each claim.
* ``potatoq_results`` (with an expiry index), ``potatoq_dead`` (capped by count and age),
  ``potatoq_workers`` (one heartbeat row per worker node, its WorkerInfo as JSON),
  ``potatoq_chords`` + ``potatoq_chord_parts`` (a fired flag per group, one row per header
  part), ``potatoq_periodic`` (primary key ``(name, fire_time)``: one winner per fire time)
  and ``potatoq_paused`` (queues paused fleet-wide; workers leave them out of claims).
* ``potatoq_migrations``: which numbered migrations the file has had (applied on first use
  by :mod:`potatoq.brokers.sqlite.setup`, which also holds the options and start-up checks).

Why it is built this way:

* SQLite has one writer, so a claim is a plain ``UPDATE … WHERE seq = (SELECT … LIMIT 1)
  RETURNING …`` (3.35+) under ``BEGIN IMMEDIATE``; no SKIP LOCKED is needed. A cheap read
  first checks for work, so idle workers never take the write lock. Due scheduled tasks are
  promoted to ready in the same claim transaction: there is no poller.
* Every write transaction is ``BEGIN IMMEDIATE``: a deferred transaction that reads and
  then writes fails at once with SQLITE_BUSY_SNAPSHOT (the busy timeout doesn't cover lock
  upgrades). Connections are in autocommit mode, so an idle one never pins a snapshot that
  would stop checkpoints.
* WAL with ``synchronous=NORMAL`` survives process crashes; only an OS crash or power loss
  can drop the last commits (``{"durable": True}`` selects FULL).
* The broker checkpoints the WAL itself, after a commit, on SQLite's 1,000-frame threshold
  (module ``wal``): SQLite's auto-checkpoint runs inside COMMIT, where the write-lock
  timing (module ``holds``) would count it. It also cuts an oversized WAL file back to
  ``journal_size_limit`` in 16 MiB steps, each its own short transaction: SQLite cuts it
  all at once inside whichever commit starts the log over, under the write lock.
* Settling is one transaction: the fenced delete (or update) of the job row, the result,
  the chord join and the follow-up tasks. ``settle_and_claim`` adds the next claim to it.
* Idle workers wake up through a doorbell (module ``doorbell``, Linux): each waiting
  thread's abstract Unix datagram socket, announced with its queues by a marker file next
  to the database, gets an empty datagram after a commit that concerns its queues (an
  enqueue: its messages' queues; claims and heartbeats: nobody; anything else: everyone).
  ``PRAGMA data_version`` (it changes whenever another connection commits, and costs
  microseconds) then says whether to look again; a fallback poll of it backs off from 2 ms
  to 1 s (50 ms without the doorbell) for writers that don't ring. Module ``waiting``.
* Fork safety: connections live in a :class:`~potatoq.brokers.base.ProcessLocal`, so a
  child never uses, closes or garbage-collects its parent's connection (closing one would
  release the parent's POSIX locks).

Concurrency limits (``potatoq/brokers/limits.py``, migration 0004): a limited task's row
carries ``limit_key`` and ``limit_max`` (read from its ``cl`` header at insert). The slots
in use *are* the key's running rows: ``job_claim`` counts them (partial index on
``limit_key`` over running rows) and skips ready rows whose key is full, and ``job_peek``
does the same so idle workers don't spin on them. Once a process has claimed a limited
task, its claims first park the ready rows of full keys (``parked = 1``: out of the ready
index, so a blocked backlog costs other claims nothing); a trigger puts a key's best
parked row back when a slot of that key is freed. Whatever ends a run (settle, requeue,
retry, recovery) frees the slot by changing that row, in the same transaction; the commit
changes ``data_version``, which wakes the waiters. ``potatoq_limits`` holds run-time
overrides (``sql/limits.sql``, module ``limits``).

Unique tasks (``potatoq/brokers/unique.py``, migration 0005): a unique task's row holds
its key in ``unique_key`` under a unique partial index, so the insert (``ON CONFLICT DO
NOTHING``) is the atomic check, in the enqueue's transaction or the caller's; deleting the
row (settle, dead-letter, revoke, purge) releases it, and ``unique_until`` is the backstop
(``sql/unique.sql``, module ``unique``).

Global rate limits (``potatoq/brokers/limits.py``, migration 0006): a rate-limited row
carries ``rate_key``, ``rate_interval`` (seconds per token) and ``rate_burst`` (from its
``rl`` header). ``potatoq_rates`` holds each key's GCRA state: ``tat`` and ``next_at``, the
time its next token is due. In the claim's write transaction (one writer: check and take
are atomic), ``rate_defer`` first moves the ready rows of keys without a token to the
scheduled state (``rate_wait = 1``) at the times their tokens are expected, one token
apart, after those moved before (``defer_at``); so a throttled backlog leaves the ready
index, no delivery is counted, and ``wait`` sleeps until the first is due
(``job_next_due``), as for an ETA. ``job_claim`` then takes the best ready row and
``rate_take`` moves its key's ``tat``. ``potatoq limits set KEY 100/s`` writes an override
on the key's row, resets its bucket and makes its waiting rows due now
(``sql/rates.sql``).

Modules: ``broker`` (the class: connections, enqueue, claim, settle, wait, recover),
``admin`` and ``results`` (its inspection/admin and result-store halves), ``connection``
(a thread's connection, the state literals, the ``data_version`` backoff) and ``setup``
(options, start-up checks, the schema from ``sql/install`` and ``sql/migrations``).
"""

from __future__ import annotations

from .broker import SQLiteBroker
from .setup import SQLiteOptions

__all__ = ["SQLiteBroker", "SQLiteOptions"]
