"""Fuzzing ``Message.decode``: whatever bytes a broker hands a worker, the only exception that
may come out is ``MessageDecodeError`` (the worker dead-letters it with the reason).

Hypothesis builds valid envelopes, then breaks them the ways a bug, an old release or an
attacker with broker access would: fields swapped for arbitrary JSON (tagged values with
values their tag can't take, huge or non-finite numbers), deep nesting, and byte-level
damage (flips, insertions, deletions, truncation). Bounded to a few hundred examples per
test, with no example database written to the working tree.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from potatoq.exceptions import MessageDecodeError
from potatoq.message import Message
from potatoq.serialization import TAG

FUZZ = settings(
    max_examples=300,
    deadline=None,  # a shared, loaded machine: no per-example timing
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TAGS = ["dt", "d", "t", "td", "u", "dec", "b", "tup", "set"]

numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),  # json.dumps writes NaN / Infinity tokens
    st.sampled_from([10**30, 2**63, -(2**63) - 1, 1e300]),
)
leaves = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=30))


def _tagged(value: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    tag = st.one_of(
        st.sampled_from(TAGS), st.text(max_size=5), numbers, st.lists(st.text(max_size=3), max_size=2)
    )
    return st.builds(lambda t, v: {TAG: t, "v": v}, tag, value)


json_values = st.recursive(
    st.one_of(leaves, _tagged(leaves)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
        _tagged(inner),
    ),
    max_leaves=20,
)

FIELDS = ["v", "id", "task", "q", "a", "k", "p", "eta", "exp", "r", "h"]


def _valid_envelope() -> dict[str, Any]:
    message = Message(id="fuzz-1", task="fuzz.add", args=(1, "two"), kwargs={"x": 3.5}, priority=2, eta=1.0)
    body: dict[str, Any] = json.loads(message.encode())
    return body


@st.composite
def mutated_envelopes(draw: st.DrawFn) -> bytes:
    body = _valid_envelope()
    for key in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
        if draw(st.booleans()):
            del body[key]
        else:
            body[key] = draw(json_values)
    if draw(st.booleans()):
        body[draw(st.sampled_from(["a", "k", "h"]))] = (
            [draw(json_values)] if draw(st.booleans()) else {"x": draw(json_values)}
        )
    text = json.dumps(body, allow_nan=True)
    depth = draw(st.sampled_from([0, 0, 0, 50, 990, 5_000, 100_000]))
    if depth:
        text = text.replace('"v":', '"deep": ' + "[" * depth + "]" * depth + ', "v":', 1)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def damaged_bytes(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(mutated_envelopes()))
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = draw(st.integers(min_value=0, max_value=max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] = draw(st.integers(min_value=0, max_value=255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(min_value=1, max_value=8))]
        else:
            del data[at:]
    return bytes(data)


def _decode_or_reason(data: bytes | str) -> None:
    try:
        Message.decode(data)
    except MessageDecodeError as exc:
        assert exc.reason, "a decode error without a reason"


@FUZZ
@given(mutated_envelopes())
def test_mutated_envelope_decodes_or_raises_only_message_decode_error(data: bytes) -> None:
    _decode_or_reason(data)


@FUZZ
@given(damaged_bytes())
def test_damaged_bytes_decode_or_raise_only_message_decode_error(data: bytes) -> None:
    _decode_or_reason(data)


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_message_decode_error(data: bytes) -> None:
    _decode_or_reason(data)


@FUZZ
@given(st.text(max_size=200))
def test_arbitrary_text_raises_only_message_decode_error(data: str) -> None:
    _decode_or_reason(data)
