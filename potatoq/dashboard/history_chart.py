"""The history page's charts: inline SVG drawn on the server from :class:`~.history.Series`.

One small chart per measure (finished/failed per bucket, latency p50/p95, runtime p50/p95),
each a few polylines in a ``viewBox`` that scales with its container. No script draws them:
a live page swaps in the new SVG with the rest of its content.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from .app_format import duration
from .history import Series

__all__ = ["history_charts"]

WIDTH, HEIGHT, PAD, LEFT = 600.0, 140.0, 24.0, 56.0


def _label(value: float, seconds: bool) -> str:
    if not seconds:
        return f"{value:.0f}"
    return f"{value * 1000:.0f} ms" if value < 1 else duration(value)


def _chart(
    title: str, lines: Sequence[tuple[str, Sequence[float | None]]], series: Series, seconds: bool
) -> str:
    values = [v for _, line in lines for v in line if v is not None]
    top = max([0.001 if seconds else 1.0, *values])
    count = max(len(line) for _, line in lines)
    span_x, span_y = WIDTH - LEFT - PAD, HEIGHT - 2 * PAD
    top_label = escape(_label(top, seconds))
    parts = [
        (
            f'<svg class="chart" viewBox="0 0 {WIDTH:.0f} {HEIGHT:.0f}" role="img" '
            f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        ),
        f'<text class="tick" x="{LEFT}" y="14">{escape(title)}</text>',
        f'<line class="axis" x1="{LEFT}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}"/>',
        f'<line class="axis" x1="{LEFT}" y1="{PAD}" x2="{LEFT}" y2="{HEIGHT - PAD}"/>',
        f'<text class="tick" x="{LEFT - 4}" y="{PAD + 4}" text-anchor="end">{top_label}</text>',
        f'<text class="tick" x="{LEFT - 4}" y="{HEIGHT - PAD}" text-anchor="end">0</text>',
        f'<text class="tick" x="{LEFT}" y="{HEIGHT - 6}">-{escape(duration(series.step * count))}</text>',
        f'<text class="tick" x="{WIDTH - PAD}" y="{HEIGHT - 6}" text-anchor="end">now</text>',
    ]
    for css, line in lines:
        points = []
        for i, value in enumerate(line):
            if value is None:
                continue
            x = LEFT + span_x * (i + 0.5) / max(1, count)
            y = HEIGHT - PAD - span_y * value / top
            points.append(f"{x:.1f},{y:.1f}")
        if points:
            parts.append(f'<polyline class="line {css}" points="{" ".join(points)}"/>')
            # a dot per bucket too: a lone bucket (a quiet hour) is no line at all
            dots = (p.split(",") for p in points)
            parts += [f'<circle class="dot {css}" cx="{x}" cy="{y}" r="2.5"/>' for x, y in dots]
    parts.append("</svg>")
    return "".join(parts)


def history_charts(series: Series, per: str = "minute") -> list[str]:
    """Three SVG charts: throughput (per bucket: ``per`` in words), enqueue-to-start
    latency and runtime."""
    finished: list[float | None] = [float(v) for v in series.finished]
    failed: list[float | None] = [float(v) for v in series.failed]
    return [
        _chart(f"finished / failed per {per}", [("processed", finished), ("failed", failed)], series, False),
        _chart("latency p50 / p95", [("p50", series.latency_p50), ("p95", series.latency_p95)], series, True),
        _chart("runtime p50 / p95", [("p50", series.runtime_p50), ("p95", series.runtime_p95)], series, True),
    ]
