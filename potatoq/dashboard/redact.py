"""What ``redact_args`` hides: arguments, results and the text of exceptions.

A task's arguments leak through more than ``args``: ``raise ValueError(f"bad {password}")``
puts them in the dead letter's reason and the stored traceback, and a result may echo them.
Redacted, an error keeps what an operator needs to triage it (the exception type, the
frames) and loses every message text.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..brokers.base import DeadLetterRecord, ResultRecord

__all__ = ["REDACTED", "dead_letter", "error_text", "record", "shown", "traceback_text"]

REDACTED = "[redacted]"
# The fixed words the worker puts before an exception in a dead letter's reason.
_REASON_PREFIXES = ("internal error", "settle failed", "undecodable message")
_TYPE_NAME = re.compile(r"[A-Za-z_][\w.]*\Z")
_FRAME = re.compile(r'  File "[^"\n]*", line \d+(, in [\w<>.]+)?\Z')


def shown(value: Any, redact: bool) -> str:
    if value is None:
        return ""
    if redact:
        return REDACTED
    try:
        return repr(value)
    except RecursionError:  # arguments nested deeper than repr() follows in this thread
        return "(nested too deeply to show)"


def error_text(text: str) -> str:
    """``"ValueError: bad password hunter2"`` → ``"ValueError: [redacted]"``."""
    kept: list[str] = []
    rest = text
    for prefix in _REASON_PREFIXES:
        if rest.startswith(f"{prefix}: "):
            kept.append(prefix)
            rest = rest[len(prefix) + 2 :]
            break
    head, sep, _message = rest.partition(": ")
    if _TYPE_NAME.match(head) and (sep or "(" not in head):
        kept.append(head)
        if sep:
            kept.append(REDACTED)
    else:
        kept.append(REDACTED)
    return ": ".join(kept)


def traceback_text(text: str) -> str:
    """The frames' locations and the exception types; no source lines, no messages."""
    lines = []
    for line in text.splitlines():
        if line.startswith("Traceback (") or _FRAME.match(line):
            lines.append(line)
        elif line and not line[0].isspace() and _TYPE_NAME.match(line.partition(":")[0]):
            lines.append(error_text(line))
    return "\n".join(lines)


def record(result: ResultRecord | None) -> ResultRecord | None:
    """A stored result with its return value and exception text hidden."""
    if result is None:
        return None
    return dataclasses.replace(
        result,
        result=REDACTED if result.result is not None else None,
        traceback=traceback_text(result.traceback) if result.traceback else result.traceback,
        args=None,
        kwargs=None,
    )


def dead_letter(letter: DeadLetterRecord) -> DeadLetterRecord:
    return dataclasses.replace(letter, reason=error_text(letter.reason))
