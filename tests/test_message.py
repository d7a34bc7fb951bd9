"""The wire envelope: messages round-trip, and bad payloads raise MessageDecodeError with a reason."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
import uuid
from decimal import Decimal

import pytest

from potatoq.exceptions import MessageDecodeError, SerializationError
from potatoq.message import VERSION, Message, new_id


def full_message() -> Message:
    return Message(
        id=new_id(),
        task="proj.tasks.add",
        args=(2, dt.datetime(2026, 1, 2, 3, 4, 5), uuid.uuid4(), Decimal("1.10"), b"\x00\x01", (1, 2), {3}),
        kwargs={"when": dt.date(2026, 1, 2), "nested": {"t": (1,)}},
        queue="reports",
        priority=7,
        eta=1764690000.5,
        expires=1764693600.0,
        retries=2,
        headers={"parent_id": "p", "chain": [{"task": "x"}]},
    )


def test_message_round_trips() -> None:
    message = full_message()
    assert Message.decode(message.encode()) == message


def test_message_round_trips_from_text() -> None:
    message = full_message()
    assert Message.decode(message.encode().decode()) == message


def test_envelope_has_top_level_routing_fields() -> None:
    body = json.loads(full_message().encode())
    assert body["v"] == VERSION
    assert (body["q"], body["p"], body["eta"]) == ("reports", 7, 1764690000.5)


def test_defaults_round_trip() -> None:
    message = Message(id="1", task="t")
    decoded = Message.decode(message.encode())
    assert decoded == message
    assert decoded.is_due()


def test_is_due_compares_eta_with_now() -> None:
    message = Message(id="1", task="t", eta=100.0)
    assert not message.is_due(now=99.9)
    assert message.is_due(now=100.0)


def test_new_ids_are_uuid7_strings() -> None:
    first, second = new_id(), new_id()
    assert first != second
    parsed = uuid.UUID(first)
    assert str(parsed) == first  # the canonical form, as Celery's uuid4 strings
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122


def test_new_ids_start_with_the_millisecond_they_were_made_in() -> None:
    # what the SQL brokers' task-id indexes rely on: a later id sorts after an earlier one
    # made in an earlier millisecond (issue 31)
    before = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(2000)]
    after = time.time_ns() // 1_000_000
    stamps = [uuid.UUID(i).int >> 80 for i in ids]
    assert before <= stamps[0] and stamps[-1] <= after
    assert stamps == sorted(stamps)
    # as strings too (what a TEXT index orders by): an id of a later millisecond sorts after
    assert all(a < b for (a, sa), (b, sb) in itertools.pairwise(zip(ids, stamps, strict=True)) if sa < sb)
    assert len(set(ids)) == len(ids)


def test_non_serializable_argument_fails_at_encode_naming_the_task() -> None:
    message = Message(id="1", task="proj.bad", args=(object(),))
    with pytest.raises(SerializationError, match="proj.bad"):
        message.encode()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b'{"v": 1, "id": "x", "task": "t"', "not valid potatoq JSON"),  # truncated
        (b"", "not valid potatoq JSON"),
        (b"\xff\xfe", "not valid potatoq JSON"),
        (b"[1, 2]", "JSON list, not an object"),
        (b'"text"', "JSON str, not an object"),
        (b"42", "JSON int, not an object"),
        (b'{"v": 2, "id": "x", "task": "t", "q": "d"}', "unknown message version 2"),
        (b'{"id": "x", "task": "t", "q": "d"}', "unknown message version None"),
        (b'{"v": 1, "task": "t", "q": "d"}', "field 'id'"),
        (b'{"v": 1, "id": "x", "task": "", "q": "d"}', "field 'task'"),
        (b'{"v": 1, "id": "x", "task": "t"}', "field 'q'"),
        (b'{"v": 1, "id": "x", "task": "t", "q": "d", "a": {"no": 1}}', "field 'a' must be a JSON list"),
        (b'{"v": 1, "id": "x", "task": "t", "q": "d", "k": [1]}', "field 'k' must be a JSON dict"),
        (b'{"v": 1, "id": "x", "task": "t", "q": "d", "p": "high"}', "field 'p' must be a 32-bit integer"),
        (b'{"v": 1, "id": "x", "task": "t", "q": "d", "eta": "soon"}', "field 'eta' must be a number"),
        (b'{"v": 1, "id": "x", "task": "t", "q": "d", "a": [{"__pq__": "zz", "v": 1}]}', "not valid"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_payload_raises_decode_error_with_a_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(MessageDecodeError) as info:
        Message.decode(payload)
    assert reason in info.value.reason
    assert str(info.value) == info.value.reason


def _with_args(args: str) -> bytes:
    return b'{"v": 1, "id": "x", "task": "t", "q": "d", "a": [' + args.encode() + b"]}"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (_with_args('{"__pq__": "dec", "v": "abc"}'), "bad 'dec' tagged value 'abc': not a decimal number"),
        (_with_args('{"__pq__": "td", "v": "abc"}'), "bad 'td' tagged value 'abc'"),
        (_with_args('{"__pq__": "td", "v": 1e300}'), "bad 'td' tagged value 1e+300"),
        (_with_args('{"__pq__": "u", "v": "abc"}'), "bad 'u' tagged value 'abc'"),
        (_with_args('{"__pq__": "u", "v": 5}'), "bad 'u' tagged value 5: must be a string"),
        (_with_args('{"__pq__": "dt", "v": "yesterday"}'), "bad 'dt' tagged value 'yesterday'"),
        (_with_args('{"__pq__": "dt", "v": 5}'), "bad 'dt' tagged value 5"),
        (_with_args('{"__pq__": "b", "v": "a!"}'), "bad 'b' tagged value 'a!'"),
        (_with_args('{"__pq__": "set", "v": [[1]]}'), "bad 'set' tagged value (a JSON list of 1)"),
        (_with_args('{"__pq__": "tup", "v": 5}'), "bad 'tup' tagged value 5"),
        (_with_args('{"__pq__": ["dec"], "v": 5}'), "unknown type tag ['dec']"),
        (_with_args("1e999"), "number 1e999 is out of range"),
        (_with_args("NaN"), "NaN is not a JSON number"),
        (_with_args("-Infinity"), "-Infinity is not a JSON number"),
        (_with_args("1" * 5000), "not valid potatoq JSON"),  # past int()'s digit limit
        (_with_args("[" * 100_000 + "]" * 100_000), "nested too deeply"),
        (b'{"v": 1, "id": "x", "task": "t", "q": "d", "p": 1e999}', "number 1e999 is out of range"),
        (b'{"v": 1, "id": "x", "task": "t", "q": "d", "p": 1e99}', "field 'p' must be a 32-bit integer"),
        (
            b'{"v": 1, "id": "x", "task": "t", "q": "d", "p": 99999999999999999999}',
            "field 'p' must be a 32-bit",
        ),
        (b'{"v": 1, "id": "x", "task": "t", "q": "d", "p": 2147483648}', "field 'p' must be a 32-bit"),
        (
            b'{"v": 1, "id": "x", "task": "t", "q": "d", "r": [1]}',
            "field 'r' must be a 32-bit integer, got (a JSON",
        ),
        (b'{"v": 1, "id": "x", "task": "t", "q": "d", "exp": true}', "field 'exp' must be a number"),
        (
            b'{"v": 1, "id": "x", "task": "t", "q": "d", "eta": 1' + b"0" * 400 + b"}",
            "field 'eta' is out of range",
        ),
    ],
    ids=lambda v: v[:60] if isinstance(v, str) else None,
)
def test_poisoned_payload_raises_only_decode_error_with_a_reason(payload: bytes, reason: str) -> None:
    """Values that parse as JSON but not as what their tag or field says (each raised
    InvalidOperation, OverflowError, AttributeError or RecursionError before)."""
    with pytest.raises(MessageDecodeError) as info:
        Message.decode(payload)
    assert reason in info.value.reason


def test_payload_over_max_size_is_refused_before_parsing() -> None:
    payload = Message(id="x", task="t", args=("x" * 1000,)).encode()
    assert Message.decode(payload, max_size=len(payload)).args == ("x" * 1000,)
    with pytest.raises(
        MessageDecodeError, match=rf"payload is {len(payload)} bytes, over the 100-byte limit"
    ):
        Message.decode(payload, max_size=100)
    # not parsed at all: garbage of the same size gets the same reason
    with pytest.raises(MessageDecodeError, match="over the 100-byte limit"):
        Message.decode(b"\xff" * len(payload), max_size=100)


def test_decode_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        Message.decode(b"nope")


def test_replace_keeps_the_id() -> None:
    message = full_message()
    retried = message.replace(retries=3, eta=1.0)
    assert (retried.id, retried.retries, retried.eta) == (message.id, 3, 1.0)
