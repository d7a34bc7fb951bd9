"""The targets of ``benchmarks.soak`` from its JSON lines, and its plots (docs/img/soak-*.png).

Usage: ``python -m benchmarks.soak_report RESULTS.jsonl... [--plot OUT_DIR]`` (the last run
per broker wins; plotting needs matplotlib, the ``bench`` extra).

Each size is compared between the end of the run and its middle (minute 15 of 30): a size
that plateaus has the same value at both (ratio ≤ 1.2), one that grows with the work done
doubles. Worker RSS and PSS the same way, within ±10 %. The SQLite write lock: the longest
wait of the probe, ≤ 100 ms.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.soak_storage import COUNTS

GROWTH = 1.2  # size at the end / size at the middle
RSS_BAND = 0.10
LOCK_MS = 100.0
MB = 2**20
PG_TABLES = ("results", "dead", "workers", "history", "jobs")  # of the PostgreSQL sizes shown


def load(paths: list[Path]) -> dict[str, dict[str, Any]]:
    runs: dict[str, dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            name = record["broker"]
            if record["kind"] == "run":
                runs[name] = {"run": record, "samples": []}
            elif name in runs:
                if record["kind"] == "sample":
                    runs[name]["samples"].append(record)
                else:
                    runs[name][record["kind"]] = record
    return {name: run for name, run in runs.items() if run["samples"]}


def middle(run: dict[str, Any]) -> dict[str, Any]:
    """The sample nearest the middle of the run (minute 15 of 30)."""
    half = run["samples"][-1]["t"] / 2
    return min(run["samples"], key=lambda s: abs(s["t"] - half))


def _peaks(run: dict[str, Any], key: str) -> tuple[float, float]:
    """The highest ``key`` in the first half of the run and in the second."""
    half = middle(run)["t"]
    first = max(s[key] for s in run["samples"] if s["t"] <= half)
    second = max(s[key] for s in run["samples"] if s["t"] > half)
    return first, second


def _ratio(end: float, mid: float) -> float | None:
    if mid == 0:
        return None if end else 1.0
    return end / mid


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _growth(end: float, mid: float, fmt: str = "{:,.0f}") -> str:
    ratio = _ratio(end, mid)
    shown = f"{fmt.format(mid)} → {fmt.format(end)}"
    if ratio is None:
        return f"{shown}: **not met**"
    return f"{shown} ({ratio:.2f}): {_verdict(ratio <= GROWTH)}"


def targets(run: dict[str, Any]) -> list[tuple[str, str]]:
    """(target, measured) rows for one broker's run."""
    from benchmarks.soak import STORAGES

    head, end, mid = run["run"], run["samples"][-1], middle(run)
    key = {cls.name: cls.BYTES for cls in STORAGES.values()}[head["broker"]]
    rows: list[tuple[str, str]] = []
    minute = f"{mid['t'] / 60:.0f}"
    for count in COUNTS:
        if count in end:
            what = f"{count} (rows, keys or messages), minute {minute} → end"
            rows.append((what, _growth(end[count], mid[count])))
    rows.append((f"storage: {key} (MB)", _growth(end[key] / MB, mid[key] / MB, "{:,.1f}")))
    for name in (key, "node rss"):
        if name in end:
            first, second = _peaks(run, name)
            shown = f"{second / MB:,.1f} / {first / MB:,.1f} MB ({second / first:.2f})"
            what = f"… {name}: highest in the second half / in the first (for a sawtooth)"
            rows.append((what, f"{shown}: {_verdict(second <= GROWTH * first)}"))
    for name in sorted(k for k in end if k.endswith(" bytes") and k != key and not k.endswith("heap bytes")):
        if name in ("file bytes", "wal bytes") or name.split(" ")[0] in PG_TABLES:
            rows.append((f"… {name} (MB)", _growth(end[name] / MB, mid[name] / MB, "{:,.2f}")))
    for name in ("backend used_memory", "node rss"):
        if name in end:
            rows.append((f"… {name} (MB)", _growth(end[name] / MB, mid[name] / MB, "{:,.1f}")))
    if "results dead tuples" in end:
        rows.append(
            (
                "PostgreSQL potatoq_results dead tuples, middle → end (autovacuums in the run)",
                (
                    f"{mid['results dead tuples']:,} → {end['results dead tuples']:,}"
                    f" ({end.get('results autovacuums', 0)} autovacuums)"
                ),
            )
        )
    later = [s for s in run["samples"] if s["t"] >= 60] or run["samples"]
    for what in ("worker rss", "worker pss"):
        ratio = end[what] / mid[what]
        low, high = min(s[what] for s in later) / MB, max(s[what] for s in later) / MB
        rows.append(
            (
                f"{what.split()[1].upper()} of the worker (MB), middle → end; range from minute 1",
                (
                    f"{mid[what] / MB:.1f} → {end[what] / MB:.1f} ({ratio:.2f}; {low:.1f} to {high:.1f}):"
                    f" {_verdict(abs(ratio - 1) <= RSS_BAND)}"
                ),
            )
        )
    if "lock" in run:
        alone = run.get("probe alone", {}).get("longest ms", float("nan"))
        longest = run["lock"]["longest ms"]
        measured = f"{longest:,.1f} ms (the probe alone before: {alone:,.1f} ms"
        if "control wait ms" in end:
            over = sum(s["waits over 100 ms"] for s in run["samples"])
            control = max(s["control wait ms"] for s in run["samples"])
            measured += f"; on an idle file all along: at most {control:,.1f} ms; {over} waits over 100 ms"
        rows.append(("SQLite: longest write-lock wait", f"{measured}): {_verdict(longest <= LOCK_MS)}"))
    seconds = end["t"]
    rows.append(
        (
            "keeping up: processed/s over the run, of the rate produced",
            (
                f"{end['processed'] / seconds:,.1f} of {end['sent'] / seconds:,.1f}/s;"
                f" most waiting {max(s['waiting'] for s in run['samples']):,},"
                f" oldest waiting at most {max(s['oldest waiting s'] for s in run['samples']):,.1f} s"
            ),
        )
    )
    return rows


def print_targets(runs: dict[str, dict[str, Any]]) -> None:
    for name, run in runs.items():
        head = run["run"]
        loads = [s["load"][0] for s in run["samples"]]
        print(
            f"\n### {name}: {head['minutes']:g} min at {head['rate']:,.1f}/s"
            + (f" (max measured {head['max rate']:,.1f}/s)" if head.get("max rate") else "")
            + f", started {head['date']}, load {min(loads):.1f} to {max(loads):.1f} (1 min)\n"
        )
        print("| target | measured |\n|---|---|")
        for target, measured in targets(run):
            print(f"| {target} | {measured} |")


def plot(name: str, run: dict[str, Any], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.soak import STORAGES

    samples = run["samples"]
    minutes = [s["t"] / 60 for s in samples]
    key = {cls.name: cls.BYTES for cls in STORAGES.values()}[name]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    size, counts, memory, backlog = axes.flat
    size.plot(minutes, [s[key] / MB for s in samples], label=key, color="black", linewidth=2)
    parts = [k for k in samples[-1] if k.endswith(" bytes") and k != key and not k.endswith("heap bytes")]
    parts += [k for k in ("backend used_memory", "node rss") if k in samples[-1]]
    for part in sorted(parts, key=lambda k: -samples[-1][k])[:6]:
        size.plot(minutes, [s.get(part, 0) / MB for s in samples], label=part)
    size.set_ylabel("MB")
    size.set_title("storage")
    for count in (*COUNTS, "job keys"):
        if count in samples[-1]:
            counts.plot(minutes, [s[count] for s in samples], label=count)
    counts.set_yscale("symlog", linthresh=10)
    counts.set_title("rows / keys / messages")
    for what in ("worker rss", "worker pss"):
        memory.plot(minutes, [s[what] / MB for s in samples], label=what)
    memory.set_ylim(bottom=0)
    memory.set_ylabel("MB")
    memory.set_title("worker memory (supervisor + 2 children)")
    backlog.plot(minutes, [s["waiting"] for s in samples], label="waiting")
    backlog.plot(minutes, [s["oldest waiting s"] for s in samples], label="oldest waiting (s)")
    if "lock wait ms" in samples[-1]:
        backlog.plot(minutes, [s["lock wait ms"] for s in samples], label="longest write-lock wait (ms)")
        if "control wait ms" in samples[-1]:
            control = [s["control wait ms"] for s in samples]
            backlog.plot(minutes, control, label="... on an idle file (ms): the machine", linestyle=":")
        backlog.axhline(LOCK_MS, color="grey", linewidth=0.8, linestyle="--")
    backlog.set_title("backlog" + (" and the write lock" if "lock wait ms" in samples[-1] else ""))
    half = middle(run)["t"] / 60
    for ax in axes.flat:
        ax.axvline(half, color="grey", linewidth=0.8, linestyle="--")  # the middle the end is compared to
        ax.set_xlabel("minutes")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    head = run["run"]
    loads = [s["load"][0] for s in samples]
    fig.suptitle(
        f"make bench-soak, {name}: {head['rate']:,.0f} tasks/s for {samples[-1]['t'] / 60:.0f} min,"
        f" results kept {head['expires']:.0f} s ({head['date']}, load {min(loads):.1f} to {max(loads):.1f})"
    )
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("paths", type=Path, nargs="+")
    parser.add_argument("--plot", type=Path, help="write soak-<broker>.png here")
    args = parser.parse_args()
    runs = load(args.paths)
    print_targets(runs)
    if args.plot is not None:
        for name, run in runs.items():
            target = args.plot / f"soak-{name.lower()}.png"
            plot(name, run, target)
            print(f"wrote {target}")


if __name__ == "__main__":
    main()
