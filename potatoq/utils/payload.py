"""Showing a payload that can't be decoded: whatever bytes someone wrote into the broker,
as one line of printable text, short enough for a terminal, a JSON listing or a web page."""

from __future__ import annotations

from .printable import printable

#: Characters shown of an undecodable payload by default.
PREVIEW_CHARS = 300


def payload_preview(raw: bytes, limit: int = PREVIEW_CHARS) -> str:
    """``raw`` as printable text: invalid UTF-8 as ``\\xNN``, control and format characters
    (newlines, ANSI escapes, bidi overrides) escaped, cut after ``limit`` characters with a
    note of the full size. Never raises."""
    text = raw[: limit * 4].decode("utf-8", "backslashreplace")  # a character is at most 4 bytes
    shown = printable(text[:limit])
    if len(text) > limit or len(raw) > limit * 4:
        shown += f"… ({len(raw)} bytes)"
    return shown
