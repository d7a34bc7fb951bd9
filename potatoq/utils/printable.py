"""Text read from the broker, made safe to print on a terminal or in a log.

Task names, ids, queue names, dead-letter reasons and tracebacks come from messages that
anything with write access to the broker may have written. Printed as they are, a newline
forges a log line and an escape sequence rewrites the operator's terminal. :func:`printable`
escapes them the way ``repr()`` would (``\\n``, ``\\x1b``, ``\\u202e``), and
:class:`EscapingFormatter` does it to every argument of a log record.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["EscapingFormatter", "printable"]

CONTINUATION = "\n    "


def printable(text: str, *, multiline: bool = False) -> str:
    """``text`` with every non-printable character escaped; ``multiline`` keeps newlines
    (for tracebacks) but still escapes the rest."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() or (multiline and char == "\n") else repr(char)[1:-1] for char in text
    )


class EscapingFormatter(logging.Formatter):
    """Escapes the arguments of each record (not the format string, not the traceback the
    formatter appends). A multi-line argument keeps its lines, each continuation indented,
    so no line of it can pass for a log record of its own."""

    def format(self, record: logging.LogRecord) -> str:
        if record.args:
            record = logging.makeLogRecord(record.__dict__)  # other handlers see the original
            if isinstance(record.args, Mapping):
                record.args = {key: _escaped(value) for key, value in record.args.items()}
            else:
                record.args = tuple(_escaped(value) for value in record.args or ())
        return super().format(record)


def _escaped(value: Any) -> Any:
    if not isinstance(value, str):
        return value  # %r of anything is repr(): escaped already; %d/%f of numbers are safe
    return printable(value, multiline=True).replace("\n", CONTINUATION)
