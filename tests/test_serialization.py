"""The JSON codec: tagged extension types round-trip, anything else fails naming where it is."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest

from potatoq import serialization
from potatoq.exceptions import SerializationError

ROUND_TRIPS: list[Any] = [
    dt.datetime(2026, 12, 2, 16, 46, 41, 123456),
    dt.datetime(2026, 12, 2, 16, 46, 41, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
    dt.date(1999, 12, 31),
    dt.time(23, 59, 58, 1),
    dt.timedelta(days=2, seconds=3, microseconds=4),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    Decimal("3.14159265358979323846264338327950288"),
    Decimal("-0.000001"),
    b"\x00\xffbinary\n",
    b"",
    (1, "two", 3.0),
    (),
    ((1, 2), [3, (4,)]),
    {1, 2, 3},
    frozenset(),
    {"nested": {"when": dt.date(2020, 1, 1), "ids": (uuid.UUID(int=1),), "raw": b"x"}},
    [None, True, False, 0, -1, 1.5, "ünïcode ✓"],
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=lambda v: type(v).__name__)
def test_values_round_trip_with_their_type(value: Any) -> None:
    decoded = serialization.loads(serialization.dumps(value))
    assert decoded == value
    assert type(decoded) is type(value) or isinstance(value, frozenset)


def test_frozenset_comes_back_as_a_set() -> None:
    assert serialization.loads(serialization.dumps(frozenset({1}))) == {1}


def test_encoding_is_compact_json() -> None:
    assert serialization.dumps({"a": [1, 2]}) == '{"a":[1,2]}'


def test_bytes_input_decodes_like_text() -> None:
    assert serialization.loads(serialization.dumps({"k": "v"}).encode()) == {"k": "v"}


def test_dict_that_looks_like_a_tag_but_is_not_is_left_alone() -> None:
    value = {"__pq__": "u", "v": "x", "extra": 1}
    assert serialization.loads(serialization.dumps(value)) == value


def test_unknown_tag_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown type tag"):
        serialization.loads('{"__pq__": "nope", "v": 1}')


def test_non_serializable_value_names_where_it_sits() -> None:
    with pytest.raises(SerializationError, match="the thing") as info:
        serialization.dumps({"x": object()}, where="the thing")
    assert "builtins.object" in str(info.value)
    assert "pickle" in str(info.value)


def test_non_serializable_positional_argument_is_named() -> None:
    class Handle:
        pass

    with pytest.raises(SerializationError) as info:
        serialization.check_serializable((1, "ok", Handle()), {})
    assert "argument 2 (Handle)" in str(info.value)


def test_non_serializable_keyword_argument_is_named() -> None:
    with pytest.raises(SerializationError) as info:
        serialization.check_serializable((), {"fine": 1, "callback": lambda: None})
    assert "keyword argument 'callback'" in str(info.value)


def test_serializable_arguments_pass() -> None:
    serialization.check_serializable((dt.date.today(), b"x", (1,)), {"d": Decimal(1), "s": {1}})


def test_object_with_json_hook_is_encoded_by_it() -> None:
    class Point:
        def __json__(self) -> dict[str, int]:
            return {"x": 1, "y": 2}

    assert serialization.loads(serialization.dumps([Point()])) == [{"x": 1, "y": 2}]


def test_serialization_error_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        serialization.dumps(object())
