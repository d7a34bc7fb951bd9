"""Queue counts past the exact-count cap are estimates, and every display marks them.

The SQL brokers count each queue's tasks exactly up to ``stats_exact_cap`` index entries
and estimate above it (potatoq.brokers.estimates); the cap is lowered here so that a few
hundred tasks take the estimate path. Nothing is timed: the speed is benchmarked by
``make bench-inspect-scale``.
"""

from __future__ import annotations

import bisect
import random
import time

import pytest

from potatoq.brokers.base import Broker, QueueStats
from potatoq.brokers.estimates import approx, sample_windows, windowed_estimate
from potatoq.cli_ops.output import Style
from potatoq.cli_ops.queues import queue_rows, queues_json, queues_table
from potatoq.dashboard import data
from potatoq.message import Message, new_id

SQL_BROKERS = pytest.mark.parametrize("make_broker", ["sqlite", "postgres"], indirect=True)


def _fill(broker: Broker, queue: str, ready: int, delayed: int = 0) -> None:
    later = time.time() + 3600
    messages = [Message(id=new_id(), task="t", queue=queue) for _ in range(ready)]
    messages += [Message(id=new_id(), task="t", queue=queue, eta=later) for _ in range(delayed)]
    for i in range(0, len(messages), 200):
        broker.enqueue(messages[i : i + 200])


def _by_queue(broker: Broker) -> dict[str, QueueStats]:
    return {s.queue: s for s in broker.queue_stats()}


@SQL_BROKERS
def test_small_queues_stay_exact_and_large_ones_are_marked_estimates(broker: Broker) -> None:
    broker.stats_exact_cap = 50  # type: ignore[attr-defined]
    _fill(broker, "big", ready=400, delayed=300)
    _fill(broker, "small", ready=50, delayed=7)  # exactly at the cap: still exact
    stats = _by_queue(broker)
    small, big = stats["small"], stats["big"]
    assert (small.waiting, small.delayed, small.estimated) == (50, 7, ())
    assert set(big.estimated) == {"waiting", "delayed"}
    # an estimate is never below the cap it is known to pass, and the sample of a table this
    # small reads all of it (SQLite) or is a page sample (PostgreSQL): within a wide band
    assert 50 < big.waiting <= 4 * 400 and 50 < big.delayed <= 4 * 300


@SQL_BROKERS
def test_counts_are_exact_below_the_default_cap(broker: Broker) -> None:
    _fill(broker, "q", ready=120, delayed=30)
    stats = _by_queue(broker)["q"]
    assert (stats.waiting, stats.delayed, stats.estimated) == (120, 30, ())


def test_every_display_marks_an_estimate() -> None:
    estimated = QueueStats("big", 1_234_567, 20, 3, 5.0, estimated=("waiting",))
    exact = QueueStats("small", 1_234_567, 20, 3, 5.0)
    rows = queue_rows([estimated, exact], [])
    text = queues_table(rows, Style(False))
    assert "≈1.2M" in text and "1234567" in text  # the exact one keeps its digits
    by_name = {r["queue"]: r for r in queues_json(rows)}
    assert by_name["big"]["estimated"] == ["waiting"] and by_name["small"]["estimated"] == []
    board = data.queue_rows([estimated, exact])
    assert [r.shown("waiting") for r in board] == ["≈1.2M", "1234567"]
    assert data.totals(board)["waiting"] == approx(2 * 1_234_567)
    assert data.totals(data.queue_rows([exact]))["waiting"] == "1234567"


def test_metrics_flag_an_estimated_count() -> None:
    pytest.importorskip("prometheus_client")
    from potatoq.brokers.base import BrokerConfig
    from potatoq.brokers.memory import MemoryBroker
    from potatoq.metrics import broker_metrics, parse_exposition

    class Estimating(MemoryBroker):
        def queue_stats(self) -> list[QueueStats]:
            return [QueueStats("big", 2_000_000, 0, 0, None, estimated=("waiting",))]

    samples = parse_exposition(broker_metrics(Estimating(BrokerConfig(url="memory://"))))
    flag = "potatoq_queue_count_estimated"
    assert samples[(flag, (("count", "waiting"), ("queue", "big")))] == 1
    assert samples[(flag, (("count", "delayed"), ("queue", "big")))] == 0
    assert samples[("potatoq_queue_waiting", (("queue", "big"),))] == 2_000_000


def test_sample_windows_cover_a_small_range_whole_and_scale_a_large_one() -> None:
    assert sample_windows(1, 500, rows=1000) == ([1], 500, 1.0)
    starts, width, scale = sample_windows(1, 1_000_000, windows=2000, rows=20_000)
    assert len(starts) == 2000 and width == 10 and scale == pytest.approx(50.0)
    assert starts == sorted(starts) and starts[0] >= 1 and starts[-1] + width <= 1_000_001


def test_windowed_estimate_of_a_sparse_queue_widens_its_windows_and_stays_close() -> None:
    # A queue's 200,000 keys spread at random over 100,000,000 (others' tasks in between):
    # the first windows cover 4,000 keys and find about 8 entries, so they are widened to
    # find about 4,000; the standard error is then about 1 / sqrt(4,000) = 1.6 % (2.5 % if
    # the first found twice too many), and 10 % is 4 of it. Kept to the first windows (no
    # widening) the error would be about 35 %. The second read overshoots when the first
    # found too few (8 times, 32,000 entries, when it found none), never the whole queue.
    # Spread at random, the entries need no more windows than the first 500 (a descent each).
    rng = random.Random(27)
    keys = sorted(rng.sample(range(100_000_000), 200_000))
    read: list[int] = []
    windows: list[int] = []

    def count(starts: list[int], width: int) -> list[int]:
        found = [bisect.bisect_left(keys, s + width) - bisect.bisect_left(keys, s) for s in starts]
        read.append(sum(found))
        windows.append(len(starts))
        return found

    for _ in range(5):
        read.clear()
        windows.clear()
        estimate = windowed_estimate(count, keys[0], keys[-1])
        assert estimate == pytest.approx(200_000, rel=0.10)
        assert len(read) == 2 and sum(read) < 50_000  # it costs the sample, not the queue
        assert windows == [500, 500]


def test_windowed_estimate_of_a_queue_enqueued_in_bursts_meets_each_burst() -> None:
    # 40 bursts of 1,000 tasks (a producer enqueueing 1,000 at a time among other queues')
    # over 2,000,000 keys: the widened windows are 2,000, one every 1,000 keys, so each
    # burst holds one or two; the error (standard 1.6 % in 1,000 simulated reads, 3.8 % at
    # worst) stays under 8 %. Widened as 500 windows only, they'd miss most bursts (19 %).
    rng = random.Random(7)
    keys = [burst * 1000 + i for burst in sorted(rng.sample(range(2_000), 40)) for i in range(1000)]

    def count(starts: list[int], width: int) -> list[int]:
        return [bisect.bisect_left(keys, s + width) - bisect.bisect_left(keys, s) for s in starts]

    for _ in range(5):
        assert windowed_estimate(count, keys[0], keys[-1]) == pytest.approx(40_000, rel=0.08)


@pytest.mark.parametrize("make_broker", ["sqlite", "postgres", "redis"], indirect=True)
def test_purge_in_batches_deletes_every_waiting_task_and_leaves_running_ones(broker: Broker) -> None:
    from potatoq.brokers.base import WorkerRef

    broker.purge_batch = 7  # type: ignore[attr-defined]
    _fill(broker, "big", ready=40, delayed=9)
    _fill(broker, "other", ready=3)
    running = broker.claim(["big"], WorkerRef("n", 1))
    assert running is not None
    assert broker.purge(["big"]) == 48  # 7 batches of 7 minus the running one
    stats = _by_queue(broker)
    assert (stats["big"].waiting, stats["big"].delayed, stats["big"].running) == (0, 0, 1)
    assert stats["other"].waiting == 3
