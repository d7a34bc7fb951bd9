"""The PostgreSQL broker's housekeeping sweep: expired results and chords, old periodic fire
times, deleted in batches repeated until done.

Batched deletes rather than a results table partitioned by expiry: each round is one short
transaction that never holds many row locks, and the table every other statement reads
stays a plain table with no partitions to create ahead of time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

SWEEP_BATCH = 5000  # rows per table per round
# Rounds per housekeeping call, repeated while a table still gave a full batch: 400 rounds is
# 2,000,000 expired results per call, so one process alone keeps pace with 30,000 results/s
# at one call a minute; a larger backlog is worked off over the next calls.
SWEEP_ROUNDS = 400
PERIODIC_RETENTION = 7 * 86400.0  # claimed fire times remembered this long

Run = Callable[[str, Mapping[str, Any]], list[tuple[Any, ...]]]


def sweep_expired(run: Run) -> int:
    """Run maintenance_sweep until a round deletes less than a batch; the rounds it took."""
    params = {"batch": SWEEP_BATCH, "periodic_keep": PERIODIC_RETENTION}
    for rounds in range(1, SWEEP_ROUNDS + 1):
        rows = run("maintenance_sweep", params)
        results, chords, _parts, periodic = rows[0] if rows else (0, 0, 0, 0)
        if max(results, chords, periodic) < SWEEP_BATCH:
            return rounds
    return SWEEP_ROUNDS
