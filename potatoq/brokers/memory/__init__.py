"""The in-process broker (``memory://NAME``): the whole contract in RAM, for unit tests.

Storage layout (one :class:`~.store.Store` per URL name, kept in a module-level registry so that an
app and a worker thread of the same process that use ``memory://NAME`` share one queue):

* ``jobs``: task id -> :class:`~.store.Job`, every task that is scheduled, ready or running. The
  payload is kept as the encoded bytes of :meth:`Message.encode`, and decoded again at
  claim with :func:`decode_delivery`, so tests exercise the same serialization (and the
  same garbage handling) as the real brokers.
* ``ready``: per queue, a heap of ``(-priority, seq, id)``; ``scheduled``: one heap of
  ``(run_at, seq, id)``. Heaps are pruned lazily: an entry whose job is gone, in another
  state or re-queued under a newer ``seq`` is skipped when popped. Due scheduled tasks are
  moved to their ready heap at claim, stats and wait time, never by a worker holding them.
* ``results`` (encoded :class:`ResultRecord` + expiry), ``dead`` (a log in death order, keyed
  by a sequence number because one id can die more than once; capped by ``dead_letter_max``
  and ``dead_letter_ttl``), ``chords``, ``fired`` (periodic dedup),
  ``heartbeats``.

One lock guards a store; every contract operation is one critical section, which is what
makes settle (result + chord join + follow-ups + removal) atomic here. Two conditions on
that lock wake :meth:`MemoryBroker.wait` (on enqueue) and :meth:`wait_for_result` (on
store). Nothing survives the process and a forked child gets a private copy, hence the
capabilities ``multiprocess=False`` and ``crash_safe_storage=False``.

Concurrency limits: a job keeps its ``limit_key``/``limit_max``; ``pop_ready`` skips jobs
whose key has that many running jobs (they keep their heap place) and a settle that frees
a slot notifies the waiters; ``limit_overrides`` holds run-time overrides.

Global rate limits: a job keeps its ``rate_key``/``rate_interval``/``rate_burst``;
``pop_ready`` takes a token of its key (GCRA state in ``rates``: ``[tat, defer_at]``) or, with
none, schedules the job at the time its token is expected (``rate_wait``), so ``wait``
sleeps until then; ``rate_overrides`` holds run-time overrides.

Modules: ``broker`` (the class), ``store`` (the per-name store, its jobs and heaps) and
``limits`` (run-time overrides and usage).
"""

from __future__ import annotations

from .broker import MemoryBroker

__all__ = ["MemoryBroker"]
