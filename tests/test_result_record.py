"""A stored result's encoding: what the result backends write for every task that keeps one."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from decimal import Decimal

import pytest

from potatoq.brokers.records import ResultRecord
from potatoq.exceptions import SerializationError


def test_a_result_round_trips_with_its_tagged_values() -> None:
    record = ResultRecord(
        task_id="t1",
        state="SUCCESS",
        result={"pair": (1, 2), "price": Decimal("1.50"), "when": dt.datetime(2026, 12, 6, 3, 4)},
        name="proj.add",
        date_done=1796526000.5,
        children=("c1", "c2"),
        args=(1, "x"),
        kwargs={"nested": [1, (2,)]},
    )
    assert ResultRecord.decode(record.encode()) == record


@dataclasses.dataclass
class Point:
    x: int
    trail: tuple[int, ...]


def test_a_dataclass_in_a_result_is_stored_as_its_fields() -> None:
    # encode() skips dataclasses.asdict; a result holding a dataclass still comes back as a dict
    record = ResultRecord(task_id="t2", state="SUCCESS", result=[Point(1, (2, 3))])
    decoded = ResultRecord.decode(record.encode())
    assert decoded.result == [{"x": 1, "trail": (2, 3)}]


def test_the_encoded_fields_are_the_records_fields() -> None:
    body = json.loads(ResultRecord(task_id="t3", state="FAILURE").encode())
    assert list(body) == [f.name for f in dataclasses.fields(ResultRecord)]


def test_a_result_json_cannot_hold_names_its_task() -> None:
    with pytest.raises(SerializationError, match="result of task t4"):
        ResultRecord(task_id="t4", state="SUCCESS", result=object()).encode()
