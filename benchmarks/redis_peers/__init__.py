"""The systems compared by ``benchmarks.bench_redis``: one small module per system, each
defining the same two tasks (``noop`` counts itself, ``stamp`` records its latency)."""

from __future__ import annotations

import os

COUNTER = "bench:done"
LATENCIES = "bench:latency"


def url() -> str:
    return os.environ["BENCH_URL"]
