"""An undecodable payload shown to an operator: printable, one line, cut short."""

from __future__ import annotations

from potatoq.utils.payload import payload_preview


def test_control_characters_and_invalid_utf8_are_escaped() -> None:
    shown = payload_preview(b"\x1b[31mred\r\nWARNING forged\xff\x00 \xe2\x80\xae caf\xc3\xa9")
    assert shown == "\\x1b[31mred\\r\\nWARNING forged\\xff\\x00 \\u202e café"
    assert shown.isprintable()


def test_a_long_payload_is_cut_with_its_size() -> None:
    assert payload_preview(b"x" * 10_000, limit=20) == "x" * 20 + "… (10000 bytes)"
    assert payload_preview(b"x" * 20, limit=20) == "x" * 20


def test_a_payload_of_multibyte_characters_is_cut_by_characters() -> None:
    assert payload_preview("é".encode() * 50, limit=10) == "é" * 10 + "… (100 bytes)"
