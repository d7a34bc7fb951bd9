"""Plots of ``benchmarks.scale --json`` figures (docs/img/scale-*.png), with matplotlib (the
``bench`` extra):

* ``scale-processed.png``: processed/s against the backlog's size, per broker, as measured
  and relative to the same run's empty-broker figure (runs of different brokers at
  different times and loads compare by the ratio, not the absolute rate);
* ``scale-bytes.png``: bytes per waiting task, per broker, each in what that broker spends
  (disk for the SQL brokers, memory for Redis, queue memory and disk for RabbitMQ).

Usage: ``python -m benchmarks.scale_plot RESULTS.jsonl [OUT_DIR]`` (the last line per
broker wins).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COLOURS = {
    "SQLite": "#4c72b0",
    "PostgreSQL": "#55a868",
    "Redis": "#c44e52",
    "Redis, again at 600,000": "#8c2d30",
    "RabbitMQ": "#dd8452",
}


def load(path: Path) -> dict[str, dict[str, Any]]:
    runs: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            out = json.loads(line)
            runs[out["broker"]] = out
    return runs


def _label(out: dict[str, Any]) -> str:
    load = out["load"][0][0]
    return f"{out['broker']} (ended {out['date'][11:]}, load {load:.1f} at start)"


def processed(runs: dict[str, dict[str, Any]], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (absolute, relative) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, out in runs.items():
        xs = [p["backlog"] for p in out["points"]]
        ys = [p["processed/s"] for p in out["points"]]
        style = {"marker": "o", "color": COLOURS.get(name), "label": _label(out)}
        absolute.plot(xs, ys, **style)
        relative.plot(xs, [y / ys[0] for y in ys], **style)
    for ax in (absolute, relative):
        ax.set_xscale("symlog", linthresh=10_000)
        ax.set_xlabel("tasks waiting in another queue (ready + delayed)")
        ax.grid(True, alpha=0.3)
    absolute.set_ylabel("processed/s (claim + settle with a result)")
    absolute.set_ylim(bottom=0)
    relative.set_ylabel("processed/s relative to the empty broker")
    relative.axhline(1.0, color="grey", linewidth=0.8)
    relative.set_ylim(0, max(1.6, relative.get_ylim()[1]))
    absolute.legend(fontsize=8)
    fig.suptitle("make bench-scale: cost per task behind a backlog (one process, broker API)")
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)


def bytes_per_task(runs: dict[str, dict[str, Any]], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars: list[tuple[str, float, str]] = []
    for name, out in runs.items():
        what = out["memory"].split(" (")[0]
        bars.append((f"{name}\n{what}", out["bytes per waiting task"], COLOURS.get(name, "grey")))
        for also, value in out["also"]:
            bars.append((f"{name}\n{also.split(' (')[0]}", value, COLOURS.get(name, "grey")))
    fig, ax = plt.subplots(figsize=(9, 4.2))
    positions = range(len(bars))
    drawn = ax.bar(positions, [b[1] for b in bars], color=[b[2] for b in bars])
    ax.bar_label(drawn, fmt="{:,.0f}")
    ax.set_xticks(list(positions), [b[0] for b in bars], fontsize=8)
    ax.set_ylabel("bytes per waiting task")
    ax.set_title("What one waiting task costs the broker (backlog of the run's size)")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    runs = load(Path(sys.argv[1]))
    out_dir = (
        Path(sys.argv[2]) if len(sys.argv) == 3 else Path(__file__).resolve().parent.parent / "docs" / "img"
    )
    processed(runs, out_dir / "scale-processed.png")
    bytes_per_task(runs, out_dir / "scale-bytes.png")
    print(f"wrote {out_dir / 'scale-processed.png'} and {out_dir / 'scale-bytes.png'}")


if __name__ == "__main__":
    main()
