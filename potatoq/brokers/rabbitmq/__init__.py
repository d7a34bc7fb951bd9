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

Concurrency and rate limits are not supported yet (``capabilities.concurrency_limits`` and
``capabilities.rate_limits`` are False; the app refuses a limited task when it is sent):
the slots and tokens would live in the result store and a task over its limit would be
re-published through the delay cascade, which is still to be built.
Unique tasks aren't either (``capabilities.unique_tasks`` is False; the app refuses them
at send): AMQP queues can't be searched, so the key would live in the result backend,
taken at publish and released after each ack or RabbitMQ's own dead-lettering.

Modules: ``broker`` (the class), ``backed`` (what lives in the result backend), ``admin``
(dead letters, stats, purges), ``options``,
``topology`` (names and headers), ``delay`` (the TTL cascade), ``declare`` (queue
declarations and reads), ``readlock`` (one reader at a time of a queue read by consuming
it), ``io`` (the per-process connection and its I/O thread),
``session`` (confirmed publishes), ``consume`` (claims), ``kills`` (the supervisor's kill
tombstones) and ``lease`` (the scheduler lease).
"""

from __future__ import annotations

from .broker import RabbitMQBroker
from .options import RabbitMQOptions

__all__ = ["RabbitMQBroker", "RabbitMQOptions"]
