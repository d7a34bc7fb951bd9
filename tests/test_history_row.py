"""A settle's history record made as a plain row (``history.row_for_settle``: what the SQL
brokers hold and insert, issue 31): the same fields, in the columns' order, and the same
rollup sample, as the record object it replaced."""

from __future__ import annotations

import dataclasses

import pytest

from potatoq import states
from potatoq.brokers.history import DEAD, HistoryRecord, HistorySettings, for_settle, row_for_settle
from potatoq.brokers.history_rollup import sample_of, sample_of_row
from potatoq.brokers.history_sql import COLUMNS
from potatoq.brokers.records import (
    Complete,
    DeadLetter,
    Delivery,
    Outcome,
    Requeue,
    ResultRecord,
    RetryLater,
    WorkerRef,
)
from potatoq.message import Message

NOW = 1_800_000_000.0
SENT = NOW - 5.0
CLAIMED = NOW - 1.5


def delivery(*, eta: float | None = None, decoded: bool = True, sent_at: object = SENT) -> Delivery:
    headers = {"sent_at": sent_at, "parent_id": "p1", "root_id": "r1", "group_id": "g1"}
    message = Message(
        id="t1",
        task="tests.add",
        queue="q",
        args=(1, 2),
        kwargs={"token": "x"},
        eta=eta,
        retries=2,
        headers=headers,
    )
    return Delivery(
        "t1",
        "q",
        b"",
        "1",
        3,
        WorkerRef("node-a", 42),
        message=message if decoded else None,
        claimed_at=CLAIMED,
    )


def test_the_row_is_in_the_insert_columns_order() -> None:
    fields = tuple(f.name for f in dataclasses.fields(HistoryRecord) if f.name != "cursor")
    assert fields == COLUMNS


def test_a_plain_success_row_holds_every_field() -> None:
    row = row_for_settle(delivery(), Complete(), NOW, HistorySettings())
    assert row is not None
    assert dict(zip(COLUMNS, row, strict=True)) == {
        "task_id": "t1",
        "name": "tests.add",
        "queue": "q",
        "state": states.SUCCESS,
        "finished_at": NOW,
        "started_at": CLAIMED,
        "enqueued_at": SENT,
        "due_at": None,
        "runtime": pytest.approx(1.5),
        "worker": "node-a",
        "pid": 42,
        "deliveries": 3,
        "retries": 2,
        "exc_type": None,
        "exc_message": None,
        "args_preview": "((1, 2), {'token': '[redacted]'})",
        "result_preview": None,
        "parent_id": "p1",
        "root_id": "r1",
        "group_id": "g1",
    }


@pytest.mark.parametrize(
    ("outcome", "state", "exc_type", "exc_message", "result_preview"),
    [
        (Complete(ResultRecord("t1", states.SUCCESS, {"n": 3})), states.SUCCESS, None, None, "{'n': 3}"),
        (Complete(error=("ValueError", "bad")), states.FAILURE, "ValueError", "bad", None),
        (
            Complete(ResultRecord("t1", states.FAILURE, {"exc_type": "KeyError", "exc_message": ["k"]})),
            states.FAILURE,
            "KeyError",
            "k",
            None,
        ),
        (
            DeadLetter("ZeroDivisionError: division by zero"),
            DEAD,
            "ZeroDivisionError",
            "division by zero",
            None,
        ),
    ],
)
def test_outcomes_give_their_state_exception_and_result(
    outcome: Outcome, state: str, exc_type: str | None, exc_message: str | None, result_preview: str | None
) -> None:
    row = row_for_settle(delivery(), outcome, NOW, HistorySettings())
    assert row is not None
    got = dict(zip(COLUMNS, row, strict=True))
    assert (got["state"], got["exc_type"], got["exc_message"], got["result_preview"]) == (
        state,
        exc_type,
        exc_message,
        result_preview,
    )


def test_a_retry_is_recorded_and_a_requeue_or_history_off_is_not() -> None:
    message = delivery().message
    assert message is not None
    retry = RetryLater(message, error=("IOError", "later"))
    row = row_for_settle(delivery(), retry, NOW, HistorySettings())
    assert row is not None and row[COLUMNS.index("state")] == states.RETRY
    assert row_for_settle(delivery(), Requeue(), NOW, HistorySettings()) is None
    assert row_for_settle(delivery(), Complete(), NOW, HistorySettings(enabled=False)) is None


def test_an_undecodable_delivery_leaves_what_the_delivery_knows() -> None:
    row = row_for_settle(delivery(decoded=False), Complete(), NOW, HistorySettings())
    assert row is not None
    got = dict(zip(COLUMNS, row, strict=True))
    assert (got["task_id"], got["queue"], got["name"], got["args_preview"], got["retries"]) == (
        "t1",
        "q",
        None,
        None,
        0,
    )


def test_the_record_object_is_the_row() -> None:
    row = row_for_settle(delivery(), Complete(), NOW, HistorySettings())
    assert row is not None
    assert for_settle(delivery(), Complete(), NOW, HistorySettings()) == HistoryRecord(*row)


@pytest.mark.parametrize(
    "made",
    [
        delivery(),
        delivery(eta=NOW - 2.0),  # due after it was sent: latency from the eta
        delivery(sent_at=None),  # no send time: no latency
        delivery(sent_at="garbage"),
        delivery(decoded=False),
    ],
)
def test_a_rows_rollup_sample_is_its_records(made: Delivery) -> None:
    row = row_for_settle(made, Complete(), NOW, HistorySettings())
    assert row is not None
    assert sample_of_row(row) == sample_of(HistoryRecord(*row))
    revoked = HistoryRecord("t2", "tests.add", "q", states.REVOKED, NOW)  # never started
    assert (
        sample_of_row(dataclasses.astuple(revoked)[:-1])
        == sample_of(revoked)
        == (
            "tests.add",
            states.REVOKED,
            NOW,
            None,
            None,
        )
    )
