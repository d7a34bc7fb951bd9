"""How the operations commands print: aligned tables for people, JSON for scripts.

Colors only when the stream is a terminal, never with ``NO_COLOR`` set (https://no-color.org)
or ``TERM=dumb``. Widths are measured on the plain text, so colored tables stay aligned.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Sequence
from typing import Any, TextIO

from potatoq.utils.printable import printable

__all__ = [
    "Cell",
    "Style",
    "ago",
    "color_enabled",
    "dump_json",
    "duration",
    "first_line",
    "table",
    "timestamp",
]

_CODES = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "cyan": "36",
}

#: How a task state is painted.
STATE_COLORS = {
    "SUCCESS": "green",
    "FAILURE": "red",
    "REVOKED": "red",
    "RETRY": "yellow",
    "STARTED": "cyan",
    "PENDING": "dim",
}


def color_enabled(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


class Style:
    """Paints text with ANSI colors, or leaves it alone when colors are off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *names: str | None) -> str:
        codes = [_CODES[name] for name in names if name]
        if not self.enabled or not codes or not text:
            return text
        return f"\033[{';'.join(codes)}m{text}\033[0m"

    def state(self, state: str) -> str:
        return self(state, STATE_COLORS.get(state))


#: A table cell: plain text, or (text, color name) to paint it.
Cell = str | tuple[str, str | None]


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    style: Style,
    *,
    right: Sequence[int] = (),
    indent: str = "",
) -> str:
    """Columns padded to their widest cell; ``right`` lists the columns of numbers. Cells
    are escaped (:func:`printable`): they hold names and reasons read from the broker."""
    plain = [[printable(c if isinstance(c, str) else c[0]) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for texts in plain:
        for i, text in enumerate(texts):
            widths[i] = max(widths[i], len(text))
    last = len(headers) - 1

    def fit(text: str, i: int) -> str:
        if i in right:
            return text.rjust(widths[i])
        return text if i == last else text.ljust(widths[i])

    lines = [indent + style("  ".join(fit(h, i) for i, h in enumerate(headers)).rstrip(), "bold")]
    for row, texts in zip(rows, plain, strict=True):
        cells: list[str] = []
        for i, (cell, text) in enumerate(zip(row, texts, strict=True)):
            padded = fit(text, i)
            cells.append(padded if isinstance(cell, str) else style(padded, cell[1]))
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


def duration(seconds: float | None) -> str:
    """``0.4s``, ``42s``, ``5m 02s``, ``2h 03m``, ``3d 04h``."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h {whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d {whole % 86400 // 3600:02d}h"


def ago(seconds: float | None) -> str:
    return "-" if seconds is None else f"{duration(seconds)} ago"


def timestamp(epoch: float | None, tz: dt.tzinfo | None = None) -> str:
    """An epoch time as ``2025-01-31 03:00:00+01:00`` (local time unless ``tz``)."""
    if epoch is None:
        return "-"
    moment = dt.datetime.fromtimestamp(epoch, tz) if tz is not None else dt.datetime.fromtimestamp(epoch)
    if tz is None:
        moment = moment.astimezone()
    return moment.isoformat(sep=" ", timespec="seconds")


def first_line(text: str | None, limit: int = 72) -> str:
    """The first line of ``text``, cut to ``limit`` characters with an ellipsis."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def dump_json(value: Any, out: TextIO) -> None:
    """JSON for scripts: one document, indented, with anything unusual shown as text."""
    out.write(json.dumps(value, indent=2, default=_fallback, ensure_ascii=False) + "\n")
    out.flush()


def _fallback(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    return repr(value)
