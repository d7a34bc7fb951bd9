"""What a message must satisfy before it is sent, checked in the caller's ``.delay()``.

A value that slipped through here would fail later, far from its cause: a priority beyond a
32-bit integer overflows PostgreSQL's column and SQLite's INTEGER, an ETA 10^308 seconds
away overflows every broker's clock arithmetic, and a task name with a newline or an escape
sequence forges log lines and rewrites the terminal of whoever runs ``potatoq dead list``.
"""

from __future__ import annotations

import math
import unicodedata

from .exceptions import InvalidName, InvalidOption

__all__ = ["LATEST", "PRIORITY_RANGE", "TASK_NAME_MAX", "check_moment", "check_priority", "check_task_name"]

PRIORITY_RANGE = (-(2**31), 2**31 - 1)  # PostgreSQL's integer column, the narrowest one
LATEST = 253402300799.0  # 9999-12-31 23:59:59 UTC: the last moment a datetime can hold
TASK_NAME_MAX = 255


def check_task_name(name: object) -> str:
    """``name`` if it is a printable string without control or format characters."""
    if not isinstance(name, str) or not name:
        raise InvalidName(f"a task name must be a non-empty string, got {name!r:.60}")
    if len(name) > TASK_NAME_MAX:
        raise InvalidName(f"task name is {len(name)} characters long; the limit is {TASK_NAME_MAX}")
    # isprintable() is False for control characters (newline, ESC …), format characters
    # (bidi overrides, zero-width), line/paragraph separators and any space but " ".
    if name.isprintable():
        return name
    char = next(c for c in name if not c.isprintable())
    raise InvalidName(
        f"invalid task name {name!r:.80}: it holds the non-printable character U+{ord(char):04X} "
        f"({unicodedata.name(char, unicodedata.category(char))}); task names must be printable"
    )


def check_priority(priority: object) -> int:
    low, high = PRIORITY_RANGE
    if isinstance(priority, bool) or not isinstance(priority, int) or not low <= priority <= high:
        raise InvalidOption(f"priority must be a whole number between {low} and {high}, got {priority!r:.40}")
    return priority


def check_moment(when: float | None, option: str) -> float | None:
    """An ETA or expiry in epoch seconds that every broker can store (or None)."""
    if when is not None and not (math.isfinite(when) and -LATEST <= when <= LATEST):
        raise InvalidOption(
            f"{option} is out of range ({when:.4g} s since 1970): it must be a finite time before "
            "the year 10000"
        )
    return when
