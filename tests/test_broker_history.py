"""The task-history part of the broker contract, once per broker in ``tests/factories``.

Every finished delivery (success, failure, retry, dead letter) and every revoke of a waiting
task leaves one record; ``Broker.history`` filters them and pages with a keyset cursor.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
import uuid

import pytest

from potatoq.brokers.base import (
    Broker,
    Complete,
    DeadLetter,
    HistoryQuery,
    HistoryRecord,
    HistorySettings,
    Requeue,
    ResultRecord,
    RetryLater,
)
from potatoq.brokers.history import DEAD
from potatoq.brokers.history_buffer import HeldHistory
from potatoq.brokers.redis import RedisBroker
from potatoq.message import Message
from potatoq.states import FAILURE, RETRY, REVOKED, SUCCESS

from .conftest import BrokerMaker
from .factories.rabbitmq import with_redis_backend
from .test_brokers import WORKER_A, claim_soon

TASK = "tests.history"


def send(broker: Broker, queue: str = "default", *, task: str = TASK, **kw: object) -> Message:
    message = Message(
        id=str(uuid.uuid4()),
        task=task,
        queue=queue,
        headers={"sent_at": time.time()},
        **kw,  # type: ignore[arg-type]
    )
    broker.enqueue([message])
    return message


def run(broker: Broker, outcome_for: object = None, queue: str = "default") -> str:
    """Claim one task from ``queue`` and settle it as a success; return its id."""
    delivery = claim_soon(broker, [queue])
    result = ResultRecord(task_id=delivery.id, state=SUCCESS, result={"total": 5}, name=TASK)
    assert broker.settle(delivery, Complete(result=result))
    return delivery.id


def records(broker: Broker, **filters: object) -> list[HistoryRecord]:
    return broker.history(HistoryQuery(**filters)).records  # type: ignore[arg-type]


def test_a_success_leaves_a_record_with_its_details(broker: Broker) -> None:
    sent = send(broker, args=(2, 3), kwargs={"password": "hunter2", "x": 1})
    task_id = run(broker)
    assert task_id == sent.id
    [record] = records(broker, task_id=task_id)
    assert (record.name, record.queue, record.state) == (TASK, "default", SUCCESS)
    assert (record.worker, record.pid, record.deliveries, record.retries) == (
        WORKER_A.node,
        WORKER_A.pid,
        1,
        0,
    )
    assert record.started_at is not None and record.finished_at >= record.started_at
    assert record.runtime is not None and record.runtime >= 0
    assert record.enqueued_at is not None and record.latency is not None
    assert record.result_preview == "{'total': 5}"
    assert record.args_preview is not None and "(2, 3)" in record.args_preview
    assert "hunter2" not in record.args_preview and "[redacted]" in record.args_preview
    assert record.exc_type is None and record.cursor


def test_failure_retry_and_dead_letter_are_recorded_with_the_exception(broker: Broker) -> None:
    sent = send(broker)
    delivery = claim_soon(broker, ["default"])
    error = {"exc_type": "KeyError", "exc_message": ["missing key 'a'"], "exc_module": "builtins"}
    retry_result = ResultRecord(task_id=sent.id, state=RETRY, result=error)
    assert broker.settle(delivery, RetryLater(message=sent.replace(retries=1), result=retry_result))
    delivery = claim_soon(broker, ["default"])
    assert broker.settle(delivery, DeadLetter(reason="ValueError: bad input 42"))
    other = send(broker)
    delivery = claim_soon(broker, ["default"])
    failure = ResultRecord(task_id=other.id, state=FAILURE, result=error)
    assert broker.settle(delivery, Complete(result=failure))

    dead, retried = records(broker, task_id=sent.id)  # newest first: the task page's order
    assert (retried.state, retried.exc_type, retried.exc_message) == (RETRY, "KeyError", "missing key 'a'")
    assert (dead.state, dead.exc_type, dead.exc_message, dead.retries) == (
        DEAD,
        "ValueError",
        "bad input 42",
        1,
    )
    [failed] = records(broker, task_id=other.id)
    assert (failed.state, failed.exc_type) == (FAILURE, "KeyError")


def test_a_requeue_leaves_no_record(broker: Broker) -> None:
    send(broker)
    delivery = claim_soon(broker, ["default"])
    assert broker.settle(delivery, Requeue())
    assert records(broker) == []
    run(broker)
    assert [r.state for r in records(broker)] == [SUCCESS]


def test_a_stale_settle_leaves_no_record(broker: Broker) -> None:
    send(broker)
    delivery = claim_soon(broker, ["default"])
    assert broker.settle(delivery, Complete())
    assert not broker.settle(delivery, Complete())
    assert len(records(broker)) == 1


def test_revoking_a_waiting_task_leaves_a_revoked_record(broker: Broker) -> None:
    if broker.capabilities.revoke_deletes:
        sent = send(broker, queue="later", eta=time.time() + 3600)
        assert broker.revoke(sent.id)
    else:  # the revoked id is skipped (and recorded) when it is delivered
        sent = send(broker, queue="later")
        assert broker.revoke(sent.id)
        broker.wait(["later"], 1.0)
        assert broker.claim(["later"], WORKER_A) is None
    [record] = records(broker, task_id=sent.id)
    assert (record.state, record.name, record.queue) == (REVOKED, TASK, "later")
    assert (record.started_at is None) == broker.capabilities.revoke_deletes  # never ran


def test_filters_by_name_state_queue_time_and_exception_text(broker: Broker) -> None:
    send(broker, task="tests.a")
    send(broker, queue="other", task="tests.b")
    run(broker)
    middle = time.time()
    run(broker, queue="other")
    send(broker, task="tests.c")
    delivery = claim_soon(broker, ["default"])
    assert broker.settle(delivery, DeadLetter(reason="TimeoutError: upstream Slow"))

    assert [r.name for r in records(broker, name="tests.a")] == ["tests.a"]
    assert [r.name for r in records(broker, queue="other")] == ["tests.b"]
    assert [r.name for r in records(broker, state=DEAD)] == ["tests.c"]
    assert [r.name for r in records(broker, text="upstream slow")] == ["tests.c"]
    assert [r.name for r in records(broker, text="timeouterror")] == ["tests.c"]
    assert [r.name for r in records(broker, until=middle)] == ["tests.a"]
    assert [r.name for r in records(broker, since=middle)] == ["tests.c", "tests.b"]
    assert records(broker, name="tests.nothing") == []


def test_keyset_pages_walk_every_record_once_newest_first(broker: Broker) -> None:
    sent = [send(broker) for _ in range(7)]
    done = [run(broker) for _ in sent]
    seen: list[str] = []
    cursor = None
    sizes = []
    while True:
        page = broker.history(HistoryQuery(limit=3, cursor=cursor))
        sizes.append(len(page.records))
        seen += [r.task_id for r in page.records]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == list(reversed(done))
    assert sizes == [3, 3, 1]


def test_history_off_records_nothing(make_broker: BrokerMaker) -> None:
    broker = make_broker(history=HistorySettings(enabled=False))
    sent = send(broker)
    run(broker)
    assert records(broker, task_id=sent.id) == []


def test_a_thread_holds_its_records_until_its_batch_is_full(make_broker: BrokerMaker) -> None:
    # flush_after far away: only the count (and flush_history) may write what is held
    broker = make_broker(history=HistorySettings(batch=3, flush_after=3600.0))
    if not isinstance(broker, HeldHistory) and not isinstance(getattr(broker, "backend", None), HeldHistory):
        pytest.skip("this broker writes each record at once")
    for _ in range(4):
        send(broker)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as worker_thread:  # one thread settles
        done = [worker_thread.submit(run, broker).result() for _ in range(2)]
        assert records(broker) == []  # held by the worker thread, not this one
        done += [worker_thread.submit(run, broker).result() for _ in range(2)]
        # the batch of three was written (by the 4th settle, or on RabbitMQ as the 3rd was held)
        assert [r.task_id for r in records(broker)][-3:] == done[2::-1]
        worker_thread.submit(broker.flush_history).result()
    assert [r.task_id for r in records(broker)] == done[::-1]


def test_a_redis_result_store_holds_a_settles_record_compact(make_broker: BrokerMaker) -> None:
    # RabbitMQ hands its settles to the result store, which keeps them in its own form: on
    # Redis a compact record (history_compact), read back with its details all the same.
    broker = with_redis_backend(make_broker)()
    store = getattr(broker, "backend", broker)
    if not isinstance(store, RedisBroker):
        pytest.skip("history lives in neither Redis nor a Redis result store")
    send(broker, args=(2, 3), kwargs={"x": 1})
    task_id = run(broker)
    broker.flush_history()
    [record] = records(broker, task_id=task_id)
    assert (record.name, record.state, record.args_preview) == (TASK, SUCCESS, "((2, 3), {'x': 1})")
    assert record.result_preview == "{'total': 5}" and record.worker == WORKER_A.node
    entries = store._client().xrange(store.keys.history)
    assert [sorted(fields) for _, fields in entries] == [[b"m", b"p"]]
    # and its per-minute rollup, latency included (from the compact meta: no payload decoded)
    [bucket] = (store.history_buckets(time.time() - 120, 60, 3, TASK) or {}).values()
    assert (bucket.records, bucket.finished) == (1, 1)
    assert bucket.latency_p50 is not None and bucket.runtime_p50 is not None


def test_retention_keeps_the_newest_max_count(make_broker: BrokerMaker) -> None:
    broker = make_broker(history=HistorySettings(max_count=2, trim_every=1))
    for _ in range(4):
        send(broker)
    done = [run(broker) for _ in range(4)]
    assert [r.task_id for r in records(broker)] == [done[3], done[2]]


def test_retention_drops_records_older_than_max_age(make_broker: BrokerMaker) -> None:
    broker = make_broker(history=HistorySettings(max_age=3600, trim_every=1))
    old = HistoryRecord(
        task_id="old", name=TASK, queue="default", state=SUCCESS, finished_at=time.time() - 4 * 3600
    )
    broker.append_history([old])
    send(broker)
    task_id = run(broker)
    assert [r.task_id for r in records(broker)] == [task_id]
    # the trim dropped the old record's rollups too, per minute and per hour (brokers that
    # keep rollups; Redis keeps two hours more than its oldest entry: append times)
    now = time.time()
    for start, step in ((now - 5 * 3600, 60), (now - now % 3600 - 5 * 3600, 3600)):
        charts = broker.history_buckets(start, step, int(6 * 3600 // step), TASK)
        if charts is not None:
            assert sum(b.records for b in charts.values()) == 1


def test_bad_queries_are_refused_naming_what_is_wrong(broker: Broker) -> None:
    with pytest.raises(ValueError, match="limit"):
        HistoryQuery(limit=0)
    with pytest.raises(ValueError, match="state 'DONE'"):
        HistoryQuery(state="DONE")
    with pytest.raises(ValueError, match="cursor 'nope'"):
        broker.history(HistoryQuery(cursor="nope"))


def test_a_task_recovery_dead_letters_is_recorded(make_broker: BrokerMaker) -> None:
    broker = make_broker(dead_after=0.2)
    if not broker.capabilities.recovers_dead_holders:
        pytest.skip("the broker itself redelivers a dead holder's tasks")
    sent = send(broker)
    claim_soon(broker, ["default"])
    deadline = time.monotonic() + 15
    while not broker.recover(0.2, 1).dead:
        assert time.monotonic() < deadline, "recover() never dead-lettered the task"
        time.sleep(0.05)
    [record] = records(broker, task_id=sent.id)
    assert (record.state, record.name, record.exc_type) == (DEAD, TASK, "WorkerLostError")


def test_a_rare_filter_reads_a_bounded_window_per_page_and_the_cursor_reads_on(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter no index serves (a queue beside the name whose index the page walks; and
    exception text among failures that don't hold it) reads at most the broker's scan
    budget per call: a short page with a cursor, and the cursors reach the one old match."""
    from potatoq.brokers import history_sql
    from potatoq.brokers.redis import history as redis_history

    monkeypatch.setattr(history_sql, "SCAN_MAX", 4)
    monkeypatch.setattr(redis_history, "SCAN_MAX", 4)
    now = time.time()

    def record(i: int, message: str | None = None) -> HistoryRecord:
        return HistoryRecord(
            task_id=f"t{i}", name=TASK, queue="rare" if i == 0 else "default", state=FAILURE,
            finished_at=now - 100 + i, exc_type="OSError", exc_message=message or "timed out",
        )  # fmt: skip

    broker.append_history([record(0, "disk quota exceeded")] + [record(i) for i in range(1, 12)])
    for query in (HistoryQuery(name=TASK, queue="rare", limit=2), HistoryQuery(text="QUOTA", limit=2)):
        pages, cursor = [], None
        while True:
            page = broker.history(dataclasses.replace(query, cursor=cursor))
            pages.append([r.task_id for r in page.records])
            cursor = page.next_cursor
            if cursor is None:
                break
        assert [t for p in pages for t in p] == ["t0"], query
        if type(broker).__name__ in ("SQLiteBroker", "PostgresBroker", "RedisBroker"):
            assert pages[0] == [] and len(pages) >= 3, query  # 12 records, 4 read per call


def test_exception_text_reads_only_the_records_with_an_exception(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text search walks the records that carry an exception (an index of them on the
    SQL brokers, the failing states' indexes merged on Redis), not the successes between
    them: with a budget of 5 records read per call, 4 matches among 41 successes come back
    in one page, newest first, with or without a time range or a second filter."""
    from potatoq.brokers import history_sql
    from potatoq.brokers.redis import history as redis_history

    monkeypatch.setattr(history_sql, "SCAN_MAX", 5)
    monkeypatch.setattr(redis_history, "SCAN_MAX", 5)
    now = time.time()
    failing = {5: FAILURE, 17: RETRY, 29: DEAD, 41: REVOKED}  # a revoked running task has one too

    def record(i: int) -> HistoryRecord:
        state = failing.get(i, SUCCESS)
        return HistoryRecord(
            task_id=f"t{i}", name=TASK, queue="default", state=state, finished_at=now - 100 + i,
            exc_type=None if state == SUCCESS else "IOError",
            exc_message=None if state == SUCCESS else f"disk quota exceeded on vol{i}",
        )  # fmt: skip

    broker.append_history([record(i) for i in range(45)])
    expected = ["t41", "t29", "t17", "t5"]
    windowed = type(broker).__name__ in ("SQLiteBroker", "PostgresBroker", "RedisBroker")
    for query in (
        HistoryQuery(text="Quota", limit=10),
        HistoryQuery(text="ioerror", since=now - 200, limit=10),
        HistoryQuery(text="quota", name=TASK, limit=10),  # a common name's index comes first
    ):
        page = broker.history(query)
        if windowed and query.name is None:
            assert ([r.task_id for r in page.records], page.next_cursor) == (expected, None), query
        assert [r.task_id for r in page.records] == expected[: len(page.records)], query
    # pages of two: the same records, in the same order, the cursor reads on
    first = broker.history(HistoryQuery(text="quota", limit=2))
    assert [r.task_id for r in first.records] == expected[:2]
    assert first.next_cursor is not None
    rest = broker.history(HistoryQuery(text="quota", limit=2, cursor=first.next_cursor))
    assert [r.task_id for r in rest.records] == expected[2:]
    assert broker.history(HistoryQuery(text="quota", state=SUCCESS)).records == []
    # a lone space is in every record's text (type, a space, message): all 45 match
    found, cursor = [], None
    while True:
        page = broker.history(HistoryQuery(text=" ", limit=50, cursor=cursor))
        found += page.records
        if (cursor := page.next_cursor) is None:
            break
    assert len(found) == 45
    unfiltered = broker.history(HistoryQuery(limit=50))
    assert broker.history(HistoryQuery(text="", limit=50)) == unfiltered  # no text: no filter


def test_a_time_range_pages_newest_first_through_equal_finish_times(broker: Broker) -> None:
    now = time.time()
    times = [now - 50, now - 40, now - 30, now - 30, now - 30, now - 20, now - 10]  # a tie of three
    broker.append_history(
        [
            HistoryRecord(task_id=f"t{i}", name=TASK, queue="default", state=SUCCESS, finished_at=t)
            for i, t in enumerate(times)
        ]
    )
    for query in (
        HistoryQuery(since=now - 45, limit=2),
        HistoryQuery(since=now - 45, until=now - 15, limit=1),
    ):
        seen, cursor = [], None
        while True:
            page = broker.history(dataclasses.replace(query, cursor=cursor))
            seen += [r.task_id for r in page.records]
            cursor = page.next_cursor
            if cursor is None:
                break
        expected = (
            ["t6", "t5", "t4", "t3", "t2", "t1"] if query.until is None else ["t5", "t4", "t3", "t2", "t1"]
        )
        assert seen == expected


def _close(fast: float | None, exact: float | None) -> bool:
    """A percentile read from a rollup histogram against the exact one: within the bucket
    error (5 µs absolute under the first bucket's top)."""
    from potatoq.brokers.history_rollup import BASE, ERROR

    if fast is None or exact is None:
        return fast is exact
    return abs(fast - exact) <= max(ERROR * exact, BASE / 2) + 1e-12


def test_chart_buckets_match_the_series_made_from_the_records(broker: Broker) -> None:
    """The dashboard's charts: a broker that keeps per-minute rollups (SQLite, PostgreSQL,
    Redis, and RabbitMQ through its result store) gives what aggregating every record
    gives: the counts exactly, nearest-rank percentiles and means within the rollup
    histogram's bucket error; per minute and per hour. Written in two batches, so the
    rollups of a minute merge."""
    from potatoq.dashboard import history as dash

    now = time.time()
    records = [
        HistoryRecord(
            task_id=f"t{i}", name=TASK if i % 3 else "tests.other", queue="default",
            state=(SUCCESS, FAILURE, RETRY, DEAD, REVOKED)[i % 5], finished_at=now - 590 + i * 7,
            started_at=None if i % 11 == 0 else now - 591 + i * 7, enqueued_at=now - 600 + i * 7 - i % 4,
            due_at=now - 598 + i * 7 if i % 6 == 0 else None, runtime=0.01 * (i % 13) + 0.003 * (i % 7),
        )
        for i in range(80)
    ]  # fmt: skip
    broker.append_history(records[::2])
    broker.append_history(records[1::2])
    has_rollups = type(broker).__name__ in ("SQLiteBroker", "PostgresBroker", "RedisBroker")
    if has_rollups:
        assert broker.history_buckets(now - 600, 60, 10) is not None  # read from rollups
    for name, span, step in ((None, 600, 60), (TASK, 600, 60), (None, 86400, 3600), (TASK, 86400, 3600)):
        fast = dash.series(broker, now, span=span, step=step, name=name)  # minutes, then hours
        slow = dash.series_of_records(broker, fast.start, step, span // step, name)
        assert (fast.finished, fast.failed, fast.records) == (slow.finished, slow.failed, slow.records)
        for field in ("latency_p50", "latency_p95", "latency_p99", "runtime_p50", "runtime_p95",
                      "runtime_p99", "latency_mean", "runtime_mean"):  # fmt: skip
            pairs = list(zip(getattr(fast, field), getattr(slow, field), strict=True))
            assert all(_close(f, e) for f, e in pairs), (field, pairs)
        assert sum(fast.finished) + sum(fast.failed) > 0
        assert any(v is not None for v in fast.runtime_p95)


def test_a_record_past_max_age_is_hidden_before_the_trim_drops_it(make_broker: BrokerMaker) -> None:
    broker = make_broker(history=HistorySettings(max_age=3600, trim_every=10_000))  # no trim yet
    now = time.time()
    broker.append_history(
        [
            HistoryRecord(task_id=task_id, name=TASK, queue="default", state=SUCCESS, finished_at=at)
            for task_id, at in (("old", now - 7200), ("new", now - 60))
        ]
    )
    assert [r.task_id for r in records(broker)] == ["new"]
    assert [r.task_id for r in records(broker, name=TASK, limit=1)] == ["new"]
    page = broker.history(HistoryQuery(limit=1))
    assert page.records[0].task_id == "new"
    assert page.next_cursor is None or broker.history(HistoryQuery(cursor=page.next_cursor)).records == []


def _linked(broker: Broker, parent_id: str, group_id: str) -> Message:
    headers = {"sent_at": time.time(), "parent_id": parent_id, "root_id": parent_id, "group_id": group_id}
    message = Message(id=str(uuid.uuid4()), task=TASK, queue="default", headers=headers)
    broker.enqueue([message])
    return message


def test_history_links_list_a_tasks_children_and_a_groups_members(broker: Broker) -> None:
    _check_links(broker)


def test_history_links_of_rabbitmq_on_a_redis_result_store(make_broker: BrokerMaker) -> None:
    broker = with_redis_backend(make_broker)()
    if not isinstance(getattr(broker, "backend", None), RedisBroker):
        pytest.skip("only RabbitMQ keeps its history in a result store")
    _check_links(broker)  # its settles' records go compact to the store, links beside them


def _check_links(broker: Broker) -> None:
    parent = send(broker)
    run(broker)
    group = f"group-{uuid.uuid4()}"
    first, second = _linked(broker, parent.id, group), _linked(broker, parent.id, group)
    assert run(broker) == first.id
    delivery = claim_soon(broker, ["default"])
    assert broker.settle(delivery, RetryLater(message=second.replace(retries=1), error=("KeyError", "a")))
    assert broker.settle(claim_soon(broker, ["default"]), DeadLetter(reason="ValueError: bad"))
    send(broker)
    run(broker)  # a task without links: in neither list

    children = broker.history_links(parent_id=parent.id)
    # once per task, with its newest record's state (the retry's record is replaced), in finish order
    assert [(c.task_id, c.state) for c in children] == [(first.id, SUCCESS), (second.id, DEAD)]
    assert children[0].name == TASK and children[0].group_id == group and children[0].parent_id == parent.id
    members = broker.history_links(group_id=group)
    assert [(m.task_id, m.state) for m in members] == [(first.id, SUCCESS), (second.id, DEAD)]
    assert broker.history_links(parent_id=first.id) == []
    assert broker.history_links(group_id="no-such-group") == []
    with pytest.raises(ValueError, match="one of parent_id= or group_id="):
        broker.history_links(parent_id=parent.id, group_id=group)


def test_rabbitmq_s_recovery_rolls_up_a_redis_result_store_s_records(make_broker: BrokerMaker) -> None:
    # A Redis store builds the charts' rollups from its stream, off the settle path: a
    # RabbitMQ worker's recovery round is one of the times it does (docs/history.md).
    broker = with_redis_backend(make_broker)()
    store = getattr(broker, "backend", None)
    if not isinstance(store, RedisBroker):
        pytest.skip("only RabbitMQ keeps its history in a result store")
    send(broker)
    run(broker)
    broker.flush_history()
    client = store._client()
    [(newest, _)] = client.xrevrange(store.keys.history, count=1)
    assert client.get(f"{store.keys.history}:rolled") != newest  # not rolled up by the settle
    broker.recover(60, 5)
    assert client.get(f"{store.keys.history}:rolled") == newest
