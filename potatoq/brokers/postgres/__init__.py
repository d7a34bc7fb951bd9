"""The PostgreSQL broker: ``postgresql://`` and ``postgres://`` URLs, on psycopg 3.

Storage layout (schema ``broker_transport_options={"schema": ...}``, else the connection's
current schema; SQL in ``sql/*.sql``, created by ``sql/install/current.sql`` or
the numbered ``sql/migrations/``):

* ``potatoq_jobs``: the hot table. It only holds scheduled (state 0), ready (1) and running
  (2) tasks; a settled task's row is deleted, so the table and its indexes stay small.
  Partial indexes, one per state, with the state literal in the SQL text (so generic plans
  still match): ``(queue, priority DESC, seq) WHERE state = 1`` for claims, ``(run_at)
  WHERE state = 0`` for promotion (far-future ETAs never touch the ready scan) and
  ``(worker, pid) WHERE state = 2`` for recovery. ``seq`` gives FIFO order within a
  priority; ``token`` (a random uuid per claim) fences settles. Autovacuum on fixed
  thresholds, no scale factor and no cost delay.
* ``potatoq_results`` (expiry index), ``potatoq_dead`` (keyed by seq, so an id that dies
  twice keeps both letters; capped by dead_letter_max, at least 1, at each dead letter and
  in the sweep, by age in the sweep), ``potatoq_workers`` (one heartbeat row per node,
  deleted by recovery once a dead node's tasks are recovered; fillfactor 50 and no index
  on its updated columns, so heartbeats are HOT updates),
  ``potatoq_chords`` + ``potatoq_chord_parts``, ``potatoq_periodic``, ``potatoq_paused``
  (queues paused fleet-wide; workers leave them out of claims), and ``potatoq_migrations``.

Why it is built this way:

* Every state change is one statement (hence one transaction and one round trip): the
  claim is ``WITH picked AS MATERIALIZED (… FOR UPDATE SKIP LOCKED LIMIT 1) UPDATE …
  RETURNING``; a settle deletes (or updates) the row fenced on its token and, in the same
  statement, writes the result, the dead letter, the chord join, the follow-up tasks and
  their NOTIFYs. ``settle_and_claim`` pipelines the settle and the next claim: two
  statements, one transaction, one round trip.
* No transaction is open while a task runs: connections are in autocommit mode, and a
  claim commits at once. Ownership is ``(worker node, pid)`` plus a heartbeat row per node;
  ``recover()`` requeues the tasks of nodes silent for ``dead_after``.
* Scheduled tasks are promoted to ready by every worker about once a second (inside
  ``claim``/``wait``), with SKIP LOCKED, and each affected queue gets one NOTIFY.
* Wake-ups: ``wait()`` LISTENs on ``potatoq:<queue>`` on one dedicated connection per
  process, read continuously by its own thread (a backend whose client stops reading holds
  back the cluster's notification queue), with a 1 s poll as the safety net. Producers
  debounce NOTIFYs per queue with a token bucket (5 at once, then one per 10 ms): a trickle
  is announced inline, a burst beyond it by trailing NOTIFYs (see :mod:`.wakeups`). An idle
  worker's claim commits asynchronously: the WAL flush would only delay the task's start.
  ``{"notify": False}`` (PgBouncer in transaction mode) switches to polling with backoff.
* Transactional enqueue: ``enqueue(messages, connection=conn)`` runs the same one-statement
  insert through the caller's psycopg 3 or psycopg 2 connection, inside their transaction.
* Fork safety: connections live in a :class:`~potatoq.brokers.base.ProcessLocal` (one per
  process and thread), the listener and the debouncer in a per-process holder; a child
  never uses, closes or garbage-collects its parent's connections.

Concurrency limits (``potatoq/brokers/limits.py``, migration 0006): a BEFORE trigger
reads a payload's ``cl`` header into ``limit_key``/``limit_max`` (a byte search in its
WHEN clause keeps it off unlimited rows), so no enqueue statement passes it. The claim
skips ready rows whose key is full and takes a slot with an upsert on the key's
``potatoq_limits`` row (``running``): its row lock serializes the claims of one key and
re-checks the count against the latest committed value, which a snapshot count can't.
AFTER triggers give the slot back when a running row is deleted or leaves state 2, in the
transaction that ended the run (settle, requeue, retry, recovery), so the counter always
equals the running rows. A settle of a limited task NOTIFYs its queue, waking a waiter.
Once a process has claimed a limited task, its claims also park the ready rows of full
keys (``parked``: out of the ready index, SKIP LOCKED), and the slot-freeing trigger puts
the key's best parked row back.
``concurrency`` on the same row is the run-time override (``sql/limits.sql``).

Unique tasks (``potatoq/brokers/unique.py``, migration 0007): a BEFORE INSERT trigger
reads a message's ``uq`` header into ``unique_key`` (under a unique partial index), so
every job insert's ``ON CONFLICT DO NOTHING`` keeps one task per key, atomically, in the
enqueue's transaction or the caller's; deleting the row releases the key, ``unique_until``
is the backstop (module ``unique``).

Global rate limits (migration 0008, ``sql/rates.sql``): a trigger reads the ``rl`` header
into ``rate_key``/``rate_interval``/``rate_burst``, as for ``cl``. ``potatoq_rates`` holds each
key's GCRA state in epoch seconds of the server clock (``tat``, ``next_at`` = when the next
token is due). ``job_claim`` skips ready rows whose key has no token and takes the token of
the row it picked with an upsert (``token``) whose ``WHERE next_at <= now`` is re-checked
under the key row's lock, so two claims can't take one token; the task is claimed only if
it got the token (and the concurrency slot is taken only after it). A claim that lost the
race returns a row of NULLs and runs again. Once a process has claimed a rate-limited
task, ``rate_defer`` runs before each of its claims (same round trip): ready rows of keys
without a token become scheduled rows (``rate_wait``) at the times their tokens are
expected, one token apart; the usual promotion makes them ready, the claiming process
promotes when the first falls due, and a 'due' NOTIFY tells the queue's idle workers.
No delivery is counted for waiting. ``rate_set`` overrides a key's rate at run time.

Modules: ``broker`` (the class: connections, enqueue, claim, settle, wait, recover),
``admin`` and ``results`` (its inspection/admin and result-store halves), ``options``,
``statements`` (the SQL of ``sql/`` rendered for a schema), ``wakeups`` (LISTEN/NOTIFY),
``clocks`` (per-process promotion/sweep pacing), ``sweep`` (batched housekeeping deletes)
and ``migrate`` (schema install/upgrade).
"""

from __future__ import annotations

from .broker import PostgresBroker, PostgresOptions

__all__ = ["PostgresBroker", "PostgresOptions"]
