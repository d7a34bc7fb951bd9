"""Task history on Redis / Valkey: the charts' rollups are built from the stream by
``history_rollup_build.lua`` (a recovery round, a chart read), not on each settle.

* the Lua gives the same hashes as history_rollup.py's Python for the same records:
  buckets (boundaries, 0, huge values), states, counts, sums;
* each record is rolled up once with several builders, and after an upgrade (rollups an
  older version wrote with its records) none is counted twice;
* records finished long before they were appended count in their finish minute; a stream
  trimmed past the cursor is read from its first entry.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable

import pytest

from potatoq.brokers.base import Complete, HistoryRecord, WorkerRef
from potatoq.brokers.history import DEAD
from potatoq.brokers.history_compact import CompactRecord, sample_of_compact
from potatoq.brokers.history_rollup import (
    BASE,
    GROWTH,
    TOP,
    Sample,
    bucket_of,
    rollup_fields,
    rollups_of,
    sample_of,
)
from potatoq.brokers.redis import RedisBroker
from potatoq.brokers.redis import history as redis_history
from potatoq.message import Message
from potatoq.states import FAILURE, RETRY, REVOKED, SUCCESS

STATES = (SUCCESS, FAILURE, RETRY, REVOKED, DEAD)


def rolled_hashes(broker: RedisBroker) -> dict[str, dict[str, int]]:
    """Every rollup hash under the broker's prefix: key suffix -> {field: count}."""
    client = broker._client()
    hk = broker.keys.history
    keys = client.zrange(f"{hk}:minutes", 0, -1)
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hgetall(key)
    return {
        key.decode()[len(hk) :]: {f.decode(): int(v) for f, v in fields.items()}
        for key, fields in zip(keys, pipe.execute(), strict=True)
    }


def python_hashes(samples: list[Sample]) -> dict[str, dict[str, int]]:
    """What history_rollup.py makes of ``samples`` as Redis hashes; sums rounded per sample
    (the script's whole microseconds), the rest as :func:`rollup_fields` gives it."""
    sums: dict[tuple[int, int, str, str], int] = {}
    for name, _, finished, runtime, latency in samples:
        minute = int(finished // 60)
        for field, value in (("run_sum", runtime), ("lat_sum", latency)):
            if value is None:
                continue
            for key in {(span, minute - minute % span, n) for span in (1, 60) for n in ("", name or "")}:
                sums[(*key, field)] = sums.get((*key, field), 0) + math.floor(value * 1e6 + 0.5)
    out = {}
    for span, minute, name, rollup in rollups_of(samples):
        fields = rollup_fields(rollup)
        got = {str(fields[i]): int(fields[i + 1]) for i in range(0, len(fields), 2)}
        for field in ("run_sum", "lat_sum"):
            if field in got:
                got[field] = sums[(span, minute, name, field)]
        out[f":m{span}:{minute}:{name}"] = got
    return out


def boundary_values() -> list[float]:
    """0, under BASE, each bucket's lower edge and the doubles either side, huge ones
    (past TOP), random ones."""
    values = [0.0, BASE / 3, math.nextafter(BASE, 0), BASE, 1e7, 1e9]  # 1e9 s: 31 years
    for b in range(TOP + 2):
        edge = BASE * GROWTH**b
        values += [math.nextafter(edge, 0), edge, math.nextafter(edge, math.inf)]
    rng = random.Random(31)
    values += [BASE * 2 ** rng.uniform(-2, 42) for _ in range(300)]
    return values


def test_the_lua_build_gives_python_s_rollups(broker: RedisBroker) -> None:
    # Full records with runtimes at every bucket edge (each in its own minute, so one
    # bucket off shows) and compact ones with random microseconds, in a few batches.
    now = time.time()
    start = now - now % 3600 - 14 * 3600  # whole hours back, within max_age
    full = [
        HistoryRecord(
            task_id=f"f{i}", name="tests.edge" if i % 3 else None, queue="default",
            state=STATES[i % 5], finished_at=start + i * 60 + 0.5, started_at=start + i * 60 - 1.0,
            enqueued_at=start + i * 60 - 1.0 - v if i % 4 else None, due_at=start if i % 7 == 0 else None,
            runtime=v if i % 9 else None,
        )
        for i, v in enumerate(boundary_values())
    ]  # fmt: skip
    rng = random.Random(5)
    compact: list[CompactRecord] = []
    for i in range(300):
        finished = int((start + rng.uniform(0, 3 * 3600)) * 1e6)
        started = finished - rng.choice((0, 1, 9, 10, 11, 12_345, rng.randrange(10**10)))
        latency = rng.choice(("", "0", "10", str(rng.randrange(10**9))))
        name = rng.choice(("tests.a", "tests.b", ""))
        meta = f"{name}\0{STATES[i % 5]}\0default\0{finished}\0{started}\x001\0node\x001\0{latency}\0"
        compact.append(("c", meta, b'{"v":1,"id":"c%d"}' % i, None))
    for chunk in range(0, len(full), 200):
        broker.append_history(full[chunk : chunk + 200])
    broker._history_buffer().extend(compact)  # as a worker's settles hold them
    broker.flush_history()
    assert rolled_hashes(broker) == {}  # appends write no rollups
    assert broker.roll_up_history(calls=10) == len(full) + len(compact)
    samples = [sample_of(r) for r in full] + [sample_of_compact(r) for r in compact]
    assert rolled_hashes(broker) == python_hashes(samples)


def test_bucket_of_is_the_log_scale_it_documents() -> None:
    # the exact computation (frexp and square roots) against log2, away from the edges
    rng = random.Random(7)
    for _ in range(5000):
        v = BASE * 2 ** rng.uniform(0, 39.9)
        exact = 1 + (math.log2(v) - math.log2(BASE)) * 4
        if abs(exact - round(exact)) > 1e-9:
            assert bucket_of(v) == int(exact), v
    assert [bucket_of(x) for x in (0.0, -1.0, BASE / 2, BASE, 1e300, math.inf)] == [0, 0, 0, 1, TOP, TOP]


def test_two_builders_roll_each_record_up_once(
    make: Callable[..., RedisBroker], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_history, "ROLLUP_BATCH", 7)
    first, second = make(), make()  # the same prefix: two workers' brokers
    now = time.time()
    total = 0

    def append(n: int) -> None:
        nonlocal total
        first.append_history(
            [HistoryRecord(task_id=f"t{total + i}", name="tests.once", queue="default", state=SUCCESS,
                           finished_at=now, started_at=now - 0.01, runtime=0.01) for i in range(n)]
        )  # fmt: skip
        total += n

    # interleaved: one call each in turn, more records in between
    for n in (10, 3, 20):
        append(n)
        first.roll_up_history(calls=1)
        second.roll_up_history(calls=1)
    # concurrent: two threads building while records keep coming
    stop = threading.Event()

    def build(broker: RedisBroker) -> None:
        while not stop.is_set():
            broker.roll_up_history(calls=1)

    threads = [threading.Thread(target=build, args=(b,)) for b in (first, second)]
    for t in threads:
        t.start()
    for _ in range(30):
        append(5)
    stop.set()
    for t in threads:
        t.join()
    [bucket] = (second.history_buckets(now - now % 60, 60, 1, "tests.once") or {}).values()
    assert bucket.records == total == 183
    minute = rolled_hashes(first)[f":m1:{int(now // 60)}:tests.once"]
    assert (minute["success"], minute["run_n"], minute["run_sum"]) == (total, total, total * 10_000)


def test_an_upgrade_does_not_count_an_older_version_s_records_twice(broker: RedisBroker) -> None:
    now = time.time()
    old = [HistoryRecord(task_id=f"o{i}", name="tests.up", queue="default", state=SUCCESS, finished_at=now)
           for i in range(4)]  # fmt: skip
    broker.append_history(old)
    broker.roll_up_history()
    # what an older version leaves: records and their rollups, no cursor
    client = broker._client()
    client.delete(f"{broker.keys.history}:rolled")

    def charted() -> int:
        charts = broker.history_buckets(now - now % 60, 60, 1, "tests.up") or {}
        return sum(b.records for b in charts.values())

    assert charted() == 4  # a chart read first: nothing rolled again
    client.delete(f"{broker.keys.history}:rolled")
    broker.append_history([HistoryRecord(task_id="new", name="tests.up", queue="default", state=SUCCESS,
                                         finished_at=now)])  # fmt: skip
    assert charted() == 5  # an append first: only the new record


def test_recovery_builds_the_rollups_and_settles_write_none(make: Callable[..., RedisBroker]) -> None:
    broker = make(dead_after=0.2)
    worker = WorkerRef("node-rollup", 1)
    sent = {"sent_at": time.time()}
    broker.enqueue([Message(id=f"r{i}", task="tests.settled", queue="roll", headers=sent) for i in range(3)])
    for _ in range(3):
        delivery = broker.claim(["roll"], worker)
        assert delivery is not None and broker.settle(delivery, Complete())
    broker.flush_history()
    assert rolled_hashes(broker) == {}  # the settle path groups and writes no rollup
    broker.recover(0.2, 5)
    now = time.time()
    minute = rolled_hashes(broker)[f":m1:{int(now // 60)}:tests.settled"]
    assert (minute["success"], minute["run_n"], minute["lat_n"]) == (3, 3, 3)


def test_a_late_record_counts_in_its_finish_minute_and_a_trim_past_the_cursor_is_skipped(
    broker: RedisBroker,
) -> None:
    now = time.time()
    finished = now - now % 60 - 2 * 3600 + 5  # appended two hours after it finished
    broker.append_history([HistoryRecord(task_id=f"l{i}", name="tests.late", queue="default",
                                         state=FAILURE, finished_at=finished) for i in range(3)])  # fmt: skip
    # trimmed before it was rolled up: the next build starts from the first entry left
    broker._client().xtrim(broker.keys.history, maxlen=1, approximate=False)
    [bucket] = (broker.history_buckets(finished - 5, 60, 1, "tests.late") or {}).values()
    assert (bucket.records, bucket.failed) == (1, 1)
