"""Task history on Redis / Valkey: filtered queries read the per-name, per-state and
per-queue index streams, and time ranges bound the stream ids read, instead of scanning
the whole capped stream.

"Reads few entries" is asserted on the broker's own budget: ``SCAN_MAX`` (the most
entries one ``history()`` call reads) is cut to 20, so 5 matches among 5,000 records come
back complete (no cursor) only when the query reads the index or a bounded id range; a
scan reads 20 non-matching entries and returns a short page with a cursor.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import pytest

from potatoq.brokers.base import Complete, HistoryQuery, HistoryRecord, HistorySettings, WorkerRef
from potatoq.brokers.history import DEAD
from potatoq.brokers.redis import RedisBroker
from potatoq.brokers.redis import history as redis_history
from potatoq.message import Message
from potatoq.states import FAILURE, RETRY, REVOKED, SUCCESS

TOTAL, RARE = 5_000, 5


def record(n: int, *, rare: bool = False, finished_at: float | None = None) -> HistoryRecord:
    return HistoryRecord(
        task_id=f"t{n}",
        name="tests.rare" if rare else "tests.bulk",
        queue="rare" if rare else "default",
        state=FAILURE if rare else SUCCESS,
        finished_at=time.time() if finished_at is None else finished_at,
    )


def append(broker: RedisBroker, records: list[HistoryRecord]) -> None:
    for start in range(0, len(records), 500):
        broker.append_history(records[start : start + 500])


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_history, "SCAN_MAX", 20)


@pytest.mark.usefixtures("small_budget")
def test_name_state_and_queue_filters_read_their_index(broker: RedisBroker) -> None:
    rare_at = set(range(0, TOTAL, TOTAL // RARE))  # spread over the stream, oldest first
    append(broker, [record(n, rare=n in rare_at) for n in range(TOTAL)])
    expected = [f"t{n}" for n in sorted(rare_at, reverse=True)]
    for query in (
        HistoryQuery(name="tests.rare"),
        HistoryQuery(state=FAILURE),
        HistoryQuery(queue="rare"),
        HistoryQuery(name="tests.rare", state=FAILURE, queue="rare"),
    ):
        page = broker.history(query)
        assert [r.task_id for r in page.records] == expected, query
        assert page.next_cursor is None, query
    # Keyset pages over an index: the cursor is the main stream's id.
    first = broker.history(HistoryQuery(name="tests.rare", limit=2))
    assert [r.task_id for r in first.records] == expected[:2]
    assert first.next_cursor is not None
    rest = broker.history(HistoryQuery(name="tests.rare", cursor=first.next_cursor))
    assert [r.task_id for r in rest.records] == expected[2:]
    # Unfiltered, the budget still bounds a call: a full page of the newest.
    assert len(broker.history(HistoryQuery(limit=10)).records) == 10


def test_indexes_are_trimmed_with_the_stream(make: Callable[..., RedisBroker]) -> None:
    broker = make(history=HistorySettings(max_count=3, trim_every=1))
    append(broker, [record(0, rare=True), *(record(n) for n in range(1, 6))])
    client = broker._client()
    history = broker.keys.history
    assert client.xlen(history) == 3
    # The rare record's indexes went with it, and are no longer listed.
    assert not client.exists(f"{history}:n:tests.rare", f"{history}:s:{FAILURE}", f"{history}:q:rare")
    listed = {k.decode() for k in client.smembers(f"{history}:indexes")}
    assert listed == {f"{history}:n:tests.bulk", f"{history}:q:default"}  # SUCCESS: none (the stream)
    assert client.xlen(f"{history}:n:tests.bulk") == 3
    assert broker.history(HistoryQuery(name="tests.rare")).records == []


@pytest.mark.usefixtures("small_budget")
def test_a_time_range_reads_only_its_stream_ids(broker: RedisBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_history, "CLOCK_SKEW", 0.0)
    monkeypatch.setattr(redis_history, "APPEND_LAG", 0.0)
    client = broker._client()

    def server_ms() -> int:
        seconds, micros = client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def after(ms: int) -> int:
        """Wait (on the server's clock) until ``ms`` has passed; the time then."""
        deadline = time.monotonic() + 30
        while (now := server_ms()) <= ms:
            assert time.monotonic() < deadline, "the server clock did not advance"
        return now

    # Ids below `since` belong to records that finished before it.
    append(broker, [record(n, finished_at=0.5) for n in range(TOTAL - RARE)])
    since = after(server_ms())
    append(broker, [record(n, rare=True, finished_at=since / 1000) for n in range(RARE)])
    page = broker.history(HistoryQuery(since=since / 1000))
    assert len(page.records) == RARE
    assert page.next_cursor is None

    # And ids past `until` (plus APPEND_LAG) hold records that finished after it.
    until = after(server_ms())
    append(broker, [record(n, finished_at=time.time() + 3600) for n in range(TOTAL - RARE)])
    page = broker.history(HistoryQuery(since=since / 1000, until=until / 1000))
    assert len(page.records) == RARE
    assert page.next_cursor is None


def test_records_are_kept_after_a_script_flush(broker: RedisBroker) -> None:
    broker.append_history([record(0)])
    broker._client().script_flush()  # the next append is refused with NOSCRIPT, then loaded
    broker.append_history([record(1, rare=True)])
    assert [r.task_id for r in broker.history(HistoryQuery(name="tests.rare")).records] == ["t1"]


@pytest.mark.usefixtures("small_budget")
def test_a_time_range_reads_late_records_from_their_index(broker: RedisBroker) -> None:
    """Ids past a range's end (up to APPEND_LAG) are read from the late index only: 5
    records that finished inside the range but were appended later come back complete
    from under 2,000 that finished after it (an unbounded read would stop at 20)."""
    until = time.time() - 100
    late = [record(n, rare=True, finished_at=until - 50) for n in range(RARE)]
    append(broker, late)
    append(broker, [record(n) for n in range(2_000)])
    page = broker.history(HistoryQuery(since=until - 3600, until=until))
    assert [r.task_id for r in page.records] == [r.task_id for r in reversed(late)]
    assert page.next_cursor is None
    client = broker._client()
    assert client.xlen(f"{broker.keys.history}:late") == RARE


def test_success_has_no_index_and_its_pages_read_the_stream(broker: RedisBroker) -> None:
    """SUCCESS records get no state index (most records are: it would copy the stream);
    a SUCCESS query reads the stream (or a name or queue index) instead, and its keyset
    pages hold exactly the SUCCESS records, newest first. An index an older version wrote
    for SUCCESS is not read: its records are found, and so are the newer ones it lacks."""
    client = broker._client()
    success_index = f"{broker.keys.history}:s:{SUCCESS}"
    states = [FAILURE if n % 7 == 3 else RETRY if n % 11 == 5 and n < 60 else SUCCESS for n in range(90)]
    full = [
        HistoryRecord(
            task_id=f"t{n}",
            name=f"tests.n{n % 2}",
            queue=f"q{n % 3}",
            state=state,
            finished_at=time.time(),
            exc_message="SUCCESS in the text" if state != SUCCESS else None,  # the pre-filter's needle
        )
        for n, state in enumerate(states)
    ]
    broker.append_history(full[:30])
    # as an older version left it: the first 30 records' SUCCESS ones in an index
    for entry_id, fields in client.xrange(broker.keys.history):
        if b'"state":"SUCCESS"' in fields[b"r"]:
            client.xadd(success_index, {"i": ""}, id=entry_id)
    old_entries = client.xlen(success_index)
    broker.append_history(full[30:60])
    # and compact records from settles, one failure holding the word SUCCESS in its payload
    worker = WorkerRef("node-index", 7)
    for n in range(60, 90):
        broker.enqueue([Message(id=f"t{n}", task=f"tests.n{n % 2}", queue=f"q{n % 3}", args=("SUCCESS",))])
        delivery = broker.claim([f"q{n % 3}"], worker)
        assert delivery is not None
        outcome = Complete() if states[n] == SUCCESS else Complete(error=("ValueError", "no"))
        assert broker.settle(delivery, outcome)
    assert client.xlen(success_index) == old_entries  # no entry for a newer record

    def pages(**filters: object) -> list[str]:
        ids: list[str] = []
        cursor = None
        while True:
            page = broker.history(HistoryQuery(limit=7, cursor=cursor, **filters))  # type: ignore[arg-type]
            ids += [r.task_id for r in page.records]
            if page.next_cursor is None:
                return ids
            cursor = page.next_cursor

    def expected(keep: Callable[[int], bool]) -> list[str]:
        return [f"t{n}" for n in reversed(range(90)) if states[n] == SUCCESS and keep(n)]

    assert pages(state=SUCCESS) == expected(lambda n: True)
    assert pages(state=SUCCESS, name="tests.n1") == expected(lambda n: n % 2 == 1)
    assert pages(state=SUCCESS, queue="q2") == expected(lambda n: n % 3 == 2)
    assert pages(state=SUCCESS, since=time.time() - 3600, until=time.time() + 1) == expected(lambda n: True)
    assert pages(state=FAILURE) == [f"t{n}" for n in reversed(range(90)) if states[n] == FAILURE]
    # a history written by this version alone has no SUCCESS index at all
    client.delete(success_index)
    broker.append_history([record(90)])
    assert not client.exists(success_index)
    assert pages(state=SUCCESS)[0] == "t90"


def test_only_the_exact_trim_caps_the_stream_and_its_indexes(make: Callable[..., RedisBroker]) -> None:
    """An append doesn't cap the stream or its indexes (``MAXLEN ~`` cost a third of each
    XADD): the exact trim, about once per ``trim_every`` records, caps them all."""
    seldom = make(history=HistorySettings(max_count=100, trim_every=10**9))
    for start in range(0, 400, 25):  # batches smaller than trim_every: no exact trim
        seldom.append_history([record(n, rare=n % 2 == 0) for n in range(start, start + 25)])
    client = seldom._client()
    history = seldom.keys.history
    assert client.xlen(history) == 400
    assert client.xlen(f"{history}:n:tests.rare") == 200
    make(history=HistorySettings(max_count=100, trim_every=1)).append_history([record(400)])
    assert client.xlen(history) == 100
    oldest = stream_id(client.xrange(history, count=1)[0][0])
    for key in (f"{history}:n:tests.rare", f"{history}:s:{FAILURE}", f"{history}:q:default"):
        assert stream_id(client.xrange(key, count=1)[0][0]) >= oldest, key
    assert len(seldom.history(HistoryQuery(name="tests.rare", limit=200)).records) == 49  # 302..398


def stream_id(entry_id: bytes) -> tuple[int, int]:
    """A stream entry id as numbers: as bytes, b"…-10" sorts before b"…-9"."""
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq)


@pytest.mark.usefixtures("small_budget")
def test_exception_text_merges_the_failing_states_indexes(broker: RedisBroker) -> None:
    """Exception text reads the indexes of the states a record with an exception has
    (RETRY, FAILURE, DEAD, REVOKED), merged newest first by id: 5 matches among 5,000
    successes come back complete, in stream order, with SUCCESS's index gone (the write
    side may stop keeping it); one call of the read script reads the 8 failing records'
    index entries and nothing else."""
    states = [RETRY, FAILURE, DEAD, REVOKED, FAILURE, RETRY, DEAD, FAILURE]
    failing = dict(zip(range(0, TOTAL, TOTAL // len(states)), states, strict=False))
    records = [
        dataclasses.replace(
            record(n),
            state=failing[n],
            exc_type="OSError",
            exc_message=f"checksum mismatch in part {n}" if i % 2 == 0 else "timed out",
        )
        if n in failing
        else record(n)
        for i, n in enumerate(range(TOTAL))
    ]
    append(broker, records)
    client = broker._client()
    client.delete(f"{broker.keys.history}:s:{SUCCESS}")
    matching = [r for r in reversed(records) if r.exc_message and "checksum" in r.exc_message]
    expected = [r.task_id for r in matching]
    assert len(expected) == 4
    for query in (
        HistoryQuery(text="CHECKSUM"),
        HistoryQuery(text="checksum mismatch", since=time.time() - 3600, until=time.time() + 1),
    ):
        page = broker.history(query)
        assert [r.task_id for r in page.records] == expected, query
        assert page.next_cursor is None, query
    first = broker.history(HistoryQuery(text="checksum", limit=3))
    assert [r.task_id for r in first.records] == expected[:3]
    rest = broker.history(HistoryQuery(text="checksum", cursor=first.next_cursor))
    assert [r.task_id for r in rest.records] == expected[3:]
    # the read script's own count: the failing states' index entries, all 8, and no more
    everything = (0.0, math.inf)
    read, last, pairs = broker._read_batch(redis_history._EXCEPTIONS, "+", "0", 100, everything, [], [], [])
    assert read == len(failing)
    assert [p[0].decode() for p in pairs][-1] == last


def test_the_failing_states_merge_reads_each_index_on_in_chunks(broker: RedisBroker) -> None:
    """history_read.lua reads each state index in chunks of 64 ids: 300 failing records of
    three states, unevenly interleaved, come back whole and in stream order."""
    cycle = [SUCCESS, FAILURE, FAILURE, RETRY, SUCCESS, DEAD, FAILURE]
    records = [
        dataclasses.replace(record(n), state=cycle[n % 7], exc_type="OSError", exc_message=f"err {n}")
        if cycle[n % 7] != SUCCESS
        else record(n)
        for n in range(420)
    ]
    append(broker, records)
    expected = [r.task_id for r in reversed(records) if r.state != SUCCESS]
    assert len(expected) == 300
    page = broker.history(HistoryQuery(text="oserror", limit=1000))
    assert [r.task_id for r in page.records] == expected
    assert page.next_cursor is None
