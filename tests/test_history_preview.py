"""A history record's argument preview: the same text for short scalar arguments (built
directly, issue 31) as for everything else (reprlib, cut short)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from potatoq.brokers.history import HistorySettings, for_settle
from potatoq.brokers.records import Complete, Delivery, WorkerRef
from potatoq.message import Message


def preview(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    message = Message(id="t1", task="tests.preview", queue="default", args=args, kwargs=kwargs)
    delivery = Delivery("t1", "default", b"", "1", 1, WorkerRef("node", 1), message=message)
    record = for_settle(delivery, Complete(), time.time(), HistorySettings(redact_kwargs=("Password",)))
    assert record is not None
    return record.args_preview


@pytest.mark.parametrize(
    ("args", "kwargs", "shown"),
    [
        ((1, "a", None, 2.5, True), {"b": 1, "a": "x"}, "((1, 'a', None, 2.5, True), {'a': 'x', 'b': 1})"),
        ((7,), {}, "((7,), {})"),
        ((), {"password": "s3cret", "user": "ann"}, "((), {'password': '[redacted]', 'user': 'ann'})"),
        # not short scalars: reprlib's shortened repr
        (("x" * 100, [1, 2]), {}, f"(('{'x' * 37}...{'x' * 38}', [1, 2]), {{}})"),
        (tuple(range(10)), {}, "((0, 1, 2, 3, 4, 5, 6, 7, ...), {})"),
        ((10**50,), {}, f"((1{'0' * 17}...{'0' * 19},), {{}})"),
    ],
)
def test_the_preview_is_reprlibs_shortened_repr_with_secrets_redacted(
    args: tuple[Any, ...], kwargs: dict[str, Any], shown: str
) -> None:
    assert preview(args, kwargs) == shown
