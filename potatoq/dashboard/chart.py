"""The overview's throughput chart: inline SVG drawn on the server, no JavaScript library.

Two lines over the last hour (or since the dashboard started, when that is more recent:
the x axis spans the samples there are): tasks finished per minute (from the workers' ``processed``
counters) and tasks waiting (summed over queues). The SVG scales with its container
(``viewBox``), so it fits a phone as well as a desktop.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from html import escape

from .app_format import duration
from .data import HOUR, Sample

__all__ = ["throughput_svg"]

WIDTH, HEIGHT, PAD, LEFT = 600.0, 160.0, 28.0, 48.0


def _points(values: Sequence[tuple[float, float]], now: float, top: float, span: float) -> str:
    span_x, span_y = WIDTH - LEFT - PAD, HEIGHT - 2 * PAD
    out = []
    for at, value in values:
        x = LEFT + span_x * (1.0 - min(span, max(0.0, now - at)) / span)
        y = HEIGHT - PAD - (span_y * value / top if top else 0.0)
        out.append(f"{x:.1f},{y:.1f}")
    return " ".join(out)


def throughput_svg(samples: Sequence[Sample], now: float) -> str:
    """The chart for ``samples`` (oldest first); a short note while there are fewer than two."""
    rates: list[tuple[float, float]] = []
    for before, after in itertools.pairwise(samples):
        seconds = after.at - before.at
        if seconds > 0:
            rates.append((after.at, after.processed * 60.0 / seconds))
    waiting = [(s.at, float(sum(q.waiting for q in s.stats))) for s in samples]
    top = max([1.0] + [v for _, v in rates] + [v for _, v in waiting])
    span = min(HOUR, max(60.0, now - samples[0].at)) if samples else HOUR
    parts = [
        (
            f'<svg class="chart" viewBox="0 0 {WIDTH:.0f} {HEIGHT:.0f}" role="img" '
            'aria-label="throughput over the last hour" xmlns="http://www.w3.org/2000/svg">'
        ),
        f'<line class="axis" x1="{LEFT}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}"/>',
        f'<line class="axis" x1="{LEFT}" y1="{PAD}" x2="{LEFT}" y2="{HEIGHT - PAD}"/>',
        f'<text class="tick" x="{LEFT - 4}" y="{PAD + 4}" text-anchor="end">{top:.0f}</text>',
        f'<text class="tick" x="{LEFT - 4}" y="{HEIGHT - PAD}" text-anchor="end">0</text>',
        f'<text class="tick" x="{LEFT}" y="{HEIGHT - 8}">-{escape(duration(span))}</text>',
        f'<text class="tick" x="{WIDTH - PAD}" y="{HEIGHT - 8}" text-anchor="end">now</text>',
    ]
    if len(samples) < 2:
        note = "collecting samples: the chart starts when the dashboard starts"
        parts.append(
            f'<text class="note" x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">{escape(note)}</text>'
        )
    else:
        if rates:
            parts.append(f'<polyline class="line processed" points="{_points(rates, now, top, span)}"/>')
        parts.append(f'<polyline class="line waiting" points="{_points(waiting, now, top, span)}"/>')
    parts.append("</svg>")
    return "".join(parts)
