"""Task history on Redis / Valkey keeps compact records (issue 31): the task's payload as
the worker received it and what only the settle knows; the full record, argument preview
included, is built when history is read. These check that a compact record reads back as
the record ``for_settle`` would have written, that a secret never rests in the stream, and
that the reader's redaction applies too."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from potatoq.brokers.base import (
    Complete,
    DeadLetter,
    HistoryQuery,
    HistorySettings,
    Outcome,
    ResultRecord,
    RetryLater,
    WorkerRef,
)
from potatoq.brokers.history import for_settle
from potatoq.brokers.redis import RedisBroker
from potatoq.message import Message
from potatoq.states import RETRY, SUCCESS

WORKER = WorkerRef("node-compact", 4242)


def _send(broker: RedisBroker, **kw: object) -> Message:
    message = Message(
        id=str(uuid.uuid4()),
        task="tests.compact",
        queue="compact",
        headers={"sent_at": time.time(), "parent_id": "p1", "root_id": "r1", "group_id": "g1"},
        **kw,  # type: ignore[arg-type]
    )
    broker.enqueue([message])
    return message


def _entries(broker: RedisBroker) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in broker._client().xrange(broker.keys.history)]


def test_a_compact_record_reads_back_as_the_full_record(broker: RedisBroker) -> None:
    outcomes: list[Outcome] = [
        Complete(),
        Complete(result=ResultRecord(task_id="x", state=SUCCESS, result={"total": 5})),
        Complete(error=("KeyError", "'a'")),
        DeadLetter(reason="ValueError: bad input"),
    ]
    expected = []
    for outcome in outcomes:
        sent = _send(broker, args=(1, "two", [3]), kwargs={"user": "ann"}, eta=time.time() - 5, retries=2)
        delivery = broker.claim(["compact"], WORKER)
        assert delivery is not None and delivery.id == sent.id
        assert broker.settle(delivery, outcome)
        full = for_settle(delivery, outcome, time.time(), broker.config.history)
        assert full is not None
        expected.append(full)
    retried = _send(broker)
    delivery = broker.claim(["compact"], WORKER)
    assert delivery is not None
    retry = RetryLater(message=retried.replace(retries=1), error=("TimeoutError", "slow"))
    assert broker.settle(delivery, retry)
    full = for_settle(delivery, retry, time.time(), broker.config.history)
    assert full is not None
    expected.append(full)
    broker.flush_history()

    entries = _entries(broker)
    assert len(entries) == len(expected)
    assert all(b"p" in fields and b"m" in fields and b"r" not in fields for fields in entries), "not compact"
    records = broker.history(HistoryQuery(queue="compact")).records[::-1]  # oldest first
    for got, want in zip(records, expected, strict=True):
        # the times are the settle's, not ours: compared apart
        assert abs(got.finished_at - want.finished_at) < 5 and got.started_at == want.started_at
        got.finished_at = want.finished_at = got.runtime = want.runtime = 0.0
        got.cursor = None
        assert got == want
    assert records[-1].state == RETRY and records[-1].exc_type == "TimeoutError"
    assert records[1].result_preview == "{'total': 5}"


def test_a_secret_keyword_argument_never_rests_in_the_stream(broker: RedisBroker) -> None:
    _send(broker, args=(2,), kwargs={"Password": "hunter2", "x": 1})
    delivery = broker.claim(["compact"], WORKER)
    assert delivery is not None
    assert broker.settle(delivery, Complete())
    broker.flush_history()
    [fields] = _entries(broker)
    assert all(b"hunter2" not in value for value in fields.values())
    [record] = broker.history(HistoryQuery()).records
    assert record.args_preview == "((2,), {'Password': '[redacted]', 'x': 1})"


def test_the_readers_redaction_applies_to_compact_records(make: Callable[..., RedisBroker]) -> None:
    writer = make()
    reader = make(history=HistorySettings(redact_kwargs=("user",)))
    _send(writer, kwargs={"user": "ann"})
    delivery = writer.claim(["compact"], WORKER)
    assert delivery is not None
    assert writer.settle(delivery, Complete())
    writer.flush_history()
    assert writer.history(HistoryQuery()).records[0].args_preview == "((), {'user': 'ann'})"
    assert reader.history(HistoryQuery()).records[0].args_preview == "((), {'user': '[redacted]'})"


def test_a_large_payload_is_recorded_in_full_with_a_short_preview(broker: RedisBroker) -> None:
    _send(broker, args=("x" * 5000,))
    delivery = broker.claim(["compact"], WORKER)
    assert delivery is not None
    assert broker.settle(delivery, Complete())
    broker.flush_history()
    [fields] = _entries(broker)
    assert b"r" in fields and b"p" not in fields and len(fields[b"r"]) < 1500
    [record] = broker.history(HistoryQuery()).records
    assert record.args_preview is not None and len(record.args_preview) <= 200


def test_filters_without_an_index_find_compact_records(broker: RedisBroker) -> None:
    """The read script's pre-filter looks into a compact entry's meta and payload: a second
    filter, a task id and exception text find compact records (and only the matching ones)."""
    sent = []
    for n, error in enumerate([None, ("TimeoutError", "upstream slow"), ("KeyError", "'a'")]):
        message = _send(broker, args=(n,))
        delivery = broker.claim(["compact"], WORKER)
        assert delivery is not None and delivery.id == message.id
        assert broker.settle(delivery, Complete(error=error) if error else Complete())
        sent.append(message)
    assert all(b"m" in fields and b"r" not in fields for fields in _entries(broker))  # compact ones

    def ids(**filters: object) -> list[str]:
        return [r.task_id for r in broker.history(HistoryQuery(**filters)).records]  # type: ignore[arg-type]

    assert ids(text="upstream slow") == [sent[1].id]
    assert ids(text="keyerror") == [sent[2].id]
    assert ids(task_id=sent[0].id) == [sent[0].id]
    assert ids(name="tests.compact", task_id=sent[2].id) == [sent[2].id]
    assert ids(name="tests.compact", queue="compact", text="timeouterror") == [sent[1].id]
    assert ids(name="tests.compact", queue="elsewhere") == []
    assert ids(queue="compact", state=SUCCESS) == [sent[0].id]


def test_an_entry_written_before_the_latency_field_still_reads_back() -> None:
    # compact meta gained the rollups' latency field (history_rollup); entries already in a
    # stream have one NUL fewer and must read as they did
    from potatoq.brokers.history_compact import record_of, sample_of_compact

    message = Message(id="t-old", task="tests.compact", queue="compact", headers={"sent_at": 100.0})
    fields = ["tests.compact", SUCCESS, "compact", "102000000", "101000000", "1", "node", "7"]
    old = "\0".join([*fields, ""])  # no latency field
    record = record_of({b"m": old.encode(), b"p": message.encode()}, HistorySettings())
    assert (record.task_id, record.state, record.runtime, record.latency) == ("t-old", SUCCESS, 1.0, 1.0)
    new = "\0".join([*fields, "1000000", ""])
    assert sample_of_compact(("c", new, message.encode(), None)) == (
        "tests.compact",
        SUCCESS,
        102.0,
        1.0,
        1.0,
    )
    assert record_of({b"m": new.encode(), b"p": message.encode()}, HistorySettings()).pid == 7


def test_a_compact_records_link_is_the_one_its_stored_fields_read_back_to() -> None:
    # the task page's link is made at settle (not decoded from the payload when written):
    # it must say what the record read back from the stream says
    from potatoq.brokers.history_compact import for_settle_compact, record_of
    from potatoq.brokers.records import Delivery
    from potatoq.brokers.redis.history_links import _link

    settings = HistorySettings()
    for headers in ({"parent_id": "p1", "group_id": "g1"}, {"group_id": "g2"}, {"parent_id": "p3"}, {}):
        message = Message(id=str(uuid.uuid4()), task="tests.linked", queue="q", headers=headers)
        delivery = Delivery(message.id, "q", message.encode(), "tok", 1, WORKER, message)
        for outcome in (Complete(), DeadLetter(reason="ValueError: no")):
            compact = for_settle_compact(delivery, outcome, time.time(), settings)
            assert isinstance(compact, tuple)
            _, meta, payload, link = compact
            read_back = record_of({b"m": meta.encode(), b"p": payload}, settings, preview=False)
            assert link == _link(read_back)
            assert (link is None) == (not headers)
