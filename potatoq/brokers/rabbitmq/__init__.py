"""The RabbitMQ broker (``amqp://``, ``amqps://``), on pika, for RabbitMQ 4.0 and newer.

Storage layout (names in :mod:`.topology`, the cascade in :mod:`.delay`):

* every potatoq queue is one quorum queue per priority band (``q``, ``q.p3``, ``q.p6``,
  ``q.p9`` by default), with ``x-delivery-limit = max_deliveries - 1`` and at-least-once
  dead-lettering into ``q.dlq``; a crash, SIGKILL or lost connection returns the unacked
  delivery and counts towards the limit, so a poison task runs ``max_deliveries`` times
  and is then dead-lettered by RabbitMQ itself;
* future tasks (ETA, countdown, retry backoff) wait in the 28-level TTL cascade
  ``potatoq.delay.L27 … L00``: replicated, no plugin, whole seconds;
* results, revocations, worker heartbeats, chord counters and periodic fire times can't
  live in AMQP queues: they go to ``config.result_backend`` (a Redis, PostgreSQL or SQLite
  broker). Without one, results and revocation raise a clear error and chords are refused;
* the periodic scheduler's leader holds a token in a single-active-consumer queue
  (:mod:`.lease`);
* a registry queue lists the potatoq queues that exist, for ``dead list`` and stats.

Why this shape: RabbitMQ can't delete or update a queued message, so every state change is
"publish the next state (confirmed), then ack the delivery". The publish is confirmed
before the ack, so a crash in between duplicates (at-least-once) and never loses.

Process model (:mod:`.io`, :mod:`.consume`): one connection per process,
owned by an I/O thread; ``claim``/``wait``/``settle`` marshal their work onto it. Each
delivery's token names the process and the work channel's generation; a settle after the
channel or connection was replaced is refused (returns False).

Claim, settle, wake-up (details in :mod:`.consume`): consumers run on every band queue a
worker asks for, with a prefetch of ``worker_prefetch_multiplier`` (1 unless set) times the
tasks the process runs at once (``serve_slots``: a worker child's threads); RabbitMQ pushes
deliveries into this process's buffer and a claim takes the best one there (queues in the
order given, bands highest first). That push is the wake-up: ``wait`` returns when a
delivery arrives. A settle publishes the follow-ups and the result hand-off (confirmed),
then acks. The first claim of a process not consuming yet, with a prefetch of 1, asks the
ready counts and takes one with ``basic.get``.

Concurrency limits, global rate limits and unique tasks (:mod:`.limits`, :mod:`.unique`,
state in :mod:`.store`): AMQP queues can't count, search or update what they hold, so the
slots, token times and unique keys live in the result backend, a Redis, PostgreSQL or
SQLite broker, each step atomic across processes (one Lua script of ``lua/`` on Redis; on
PostgreSQL a short transaction locking the key's row, on SQLite a ``BEGIN IMMEDIATE`` one,
statements in ``sql/``); without a result backend a limited or unique task is refused at
send. A claim takes the delivery's slot (a
holder with a lease its process renews; a killed process's slot expires) and rate token;
a task over its limit is *parked*: published again (confirmed) into the delay cascade,
then acked, so it is no delivery and holds no worker thread, at the cost of one publish
per parked try, in whole seconds (1 s for a slot; for a rate, about when its place in the
key's line of waiters comes). A rate token due within a second is reserved and waited for
in the process, held unacked while the process runs other tasks beside it. The slot
goes back and the unique key is released after the settle's ack; a unique key is taken
before the publish, and a task RabbitMQ dead-letters by itself frees it by its TTL.

Modules: ``broker`` (the class), ``backed`` (what lives in the result backend), ``admin``
(dead letters, stats, purges), ``options``, ``limits``, ``unique`` and ``store`` (limits
and unique keys in the result backend: ``store_redis``, ``store_sql`` with
``store_postgres`` and ``store_sqlite``),
``topology`` (names and headers), ``delay`` (the TTL cascade), ``declare`` (queue
declarations and reads), ``readlock`` (one reader at a time of a queue read by consuming
it), ``io`` (the per-process connection and its I/O thread),
``session`` (confirmed publishes), ``consume`` (claims), ``holds`` (deliveries waiting
in the process for a rate token), ``kills`` (the supervisor's kill tombstones) and
``lease`` (the scheduler lease).
"""

from __future__ import annotations

from .broker import RabbitMQBroker
from .options import RabbitMQOptions

__all__ = ["RabbitMQBroker", "RabbitMQOptions"]
