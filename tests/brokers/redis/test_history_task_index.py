"""Task history on Redis / Valkey: a task's records are found through the task index
(history_append.lua's buckets), at any depth, not by scanning the newest entries.

As in test_history_index, ``SCAN_MAX`` (the most entries one ``history()`` call reads) is
cut to 20: a task whose records lie under 2,000 newer ones comes back complete only when
the query reads the index.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from potatoq.brokers.base import (
    Complete,
    HistoryQuery,
    HistoryRecord,
    HistorySettings,
    RetryLater,
    WorkerRef,
)
from potatoq.brokers.redis import RedisBroker
from potatoq.brokers.redis import history as redis_history
from potatoq.message import Message
from potatoq.states import RETRY, SUCCESS

NEWER = 2_000


def record(task_id: str, state: str = SUCCESS) -> HistoryRecord:
    return HistoryRecord(
        task_id=task_id, name="tests.bulk", queue="default", state=state, finished_at=time.time()
    )


def append(broker: RedisBroker, records: list[HistoryRecord]) -> None:
    for start in range(0, len(records), 500):
        broker.append_history(records[start : start + 500])


def newer(broker: RedisBroker, count: int = NEWER) -> None:
    append(broker, [record(f"other-{n}") for n in range(count)])


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_history, "SCAN_MAX", 20)


@pytest.mark.usefixtures("small_budget")
def test_a_task_lists_every_delivery_under_many_newer_records(broker: RedisBroker) -> None:
    # Compact records (the task's payload: its id read from it) of two retries and a success.
    message = Message(id=str(uuid.uuid4()), task="tests.retried", queue="tidx")
    broker.enqueue([message])
    worker = WorkerRef("node-tidx", 1)
    for retries in (1, 2):
        delivery = broker.claim(["tidx"], worker)
        assert delivery is not None
        retry = RetryLater(message=message.replace(retries=retries), error=("TimeoutError", "slow"))
        assert broker.settle(delivery, retry)
    delivery = broker.claim(["tidx"], worker)
    assert delivery is not None and broker.settle(delivery, Complete())
    broker.flush_history()
    # A full record whose id JSON escapes (read by decoding the record).
    odd = 'odd"id\\é'
    append(broker, [record(odd)])
    newer(broker)

    page = broker.history(HistoryQuery(task_id=message.id))
    assert [r.state for r in page.records] == [SUCCESS, RETRY, RETRY]
    assert page.next_cursor is None
    assert [r.task_id for r in broker.history(HistoryQuery(task_id=odd)).records] == [odd]
    # Keyset pages and other filters over the task's records.
    first = broker.history(HistoryQuery(task_id=message.id, limit=2))
    assert first.next_cursor is not None
    rest = broker.history(HistoryQuery(task_id=message.id, cursor=first.next_cursor))
    assert [r.state for r in rest.records] == [RETRY] and rest.next_cursor is None
    assert len(broker.history(HistoryQuery(task_id=message.id, state=RETRY)).records) == 2
    assert broker.history(HistoryQuery(task_id="no-such-task")).records == []


def test_task_buckets_are_dropped_once_their_records_are_trimmed(make: Callable[..., RedisBroker]) -> None:
    broker = make(history=HistorySettings(max_count=1, trim_every=10**9))  # trims (exactly) seldom
    client = broker._client()
    tasks = f"{broker.keys.history}:tasks"
    append(broker, [record("first"), *(record(f"n{n}") for n in range(1030))])  # 1,024 tasks a bucket
    buckets = client.zrange(tasks, 0, -1)
    assert len(buckets) == 2
    # A record appended in a later ms than the second bucket's start, with an exact trim.
    newest = int(client.xrevrange(broker.keys.history, count=1)[0][0].split(b"-")[0])
    deadline = time.monotonic() + 30
    seconds, micros = client.time()
    while int(seconds) * 1000 + int(micros) // 1000 <= newest:
        assert time.monotonic() < deadline, "the server clock did not advance"
        seconds, micros = client.time()
    make(history=HistorySettings(max_count=1, trim_every=1)).append_history([record("last")])
    assert client.xlen(broker.keys.history) == 1
    # a trimmed record's entry in a bucket that is kept is skipped
    assert client.hexists(buckets[1], "n1029")
    assert broker.history(HistoryQuery(task_id="n1029")).records == []
    # the older bucket pointed only at trimmed records: gone, and no longer listed
    assert client.zrange(tasks, 0, -1) == buckets[1:]
    assert not client.exists(buckets[0])
    assert [r.task_id for r in broker.history(HistoryQuery(task_id="last")).records] == ["last"]


def test_records_from_before_the_index_are_still_found(broker: RedisBroker) -> None:
    append(broker, [record("old", RETRY), record("old")])
    client = broker._client()
    tasks = f"{broker.keys.history}:tasks"
    client.delete(*client.zrange(tasks, 0, -1), tasks)  # as an older version left them
    append(broker, [record("old", RETRY)])  # indexed
    newer(broker, 50)
    records = broker.history(HistoryQuery(task_id="old")).records
    assert [r.state for r in records] == [RETRY, SUCCESS, RETRY]
    # and a history with no index at all
    client.delete(*client.zrange(tasks, 0, -1), tasks)
    assert len(broker.history(HistoryQuery(task_id="old")).records) == 3


def test_a_task_id_sent_again_and_again_keeps_its_newest_records(broker: RedisBroker) -> None:
    """An index entry is bounded (16 KiB of ids): it keeps the task's newest records."""
    records = [record("again", RETRY) for _ in range(1_200)] + [record("again")]
    append(broker, records)
    client = broker._client()
    [bucket] = client.zrange(f"{broker.keys.history}:tasks", 0, -1)
    assert len(client.hget(bucket, "again") or b"") <= 16384 + 40
    page = broker.history(HistoryQuery(task_id="again", limit=3))
    assert [r.state for r in page.records] == [SUCCESS, RETRY, RETRY]
