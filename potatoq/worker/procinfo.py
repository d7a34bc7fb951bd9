"""What the host gives this process: usable CPUs and resident memory.

``os.cpu_count()`` counts the machine's CPUs, not the ones a container or ``taskset`` lets
us use; forking one child per machine CPU inside a 2-CPU container only adds contention.
So the default concurrency is the smaller of the affinity mask and the cgroup CPU quota.
"""

from __future__ import annotations

import math
import os
import re
import resource
import sys
from pathlib import Path

__all__ = ["available_cpus", "cgroup_cpu_limit", "parse_size_kib", "rss_kib"]

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _affinity_cpus() -> int:
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        try:
            return len(getaffinity(0)) or 1
        except OSError:
            pass
    return os.cpu_count() or 1


def _quota_from_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max``: ``"max 100000"`` (no limit) or ``"150000 100000"`` (1.5 CPUs)."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    quota, period = int(parts[0]), int(parts[1])
    return quota / period if quota > 0 and period > 0 else None


def _cgroup_v2_dir(proc_cgroup: str, root: Path) -> Path | None:
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return root / line[3:].lstrip("/")
    return None


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> float | None:
    """CPUs allowed by the cgroup quota (the tightest along the cgroup's ancestors), or None."""
    try:
        membership = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    limits: list[float] = []
    leaf = _cgroup_v2_dir(membership, root)
    if leaf is not None:  # cgroup v2: walk up to the root, every level can cap us
        directory = leaf
        while True:
            try:
                quota = _quota_from_cpu_max((directory / "cpu.max").read_text())
            except (OSError, ValueError):
                quota = None
            if quota is not None:
                limits.append(quota)
            if directory == root or root not in directory.parents:
                break
            directory = directory.parent
    else:  # cgroup v1
        for line in membership.splitlines():
            fields = line.split(":", 2)
            if len(fields) == 3 and "cpu" in fields[1].split(","):
                base = root / "cpu" / fields[2].lstrip("/")
                for directory in (base, root / "cpu"):
                    try:
                        quota = int((directory / "cpu.cfs_quota_us").read_text())
                        period = int((directory / "cpu.cfs_period_us").read_text())
                    except (OSError, ValueError):
                        continue
                    if quota > 0 and period > 0:
                        limits.append(quota / period)
                        break
    return min(limits) if limits else None


def available_cpus() -> int:
    """The default worker concurrency: affinity CPUs, capped by the cgroup quota (rounded up)."""
    cpus = _affinity_cpus()
    quota = cgroup_cpu_limit()
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def rss_kib(pid: int | None = None) -> int:
    """Resident memory of ``pid`` (default: this process) in KiB, as Celery's setting counts it."""
    target = "self" if pid is None else str(pid)
    try:
        with open(f"/proc/{target}/statm", "rb") as f:
            resident_pages = int(f.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        pass
    if pid is not None and pid != os.getpid():
        return 0  # no /proc (macOS): only our own usage is known
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # peak, the best macOS offers
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS, KiB on Linux


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNIT_KIB = {"": 1, "k": 1, "m": 1024, "g": 1024**2, "t": 1024**3}


def parse_size_kib(text: str | int) -> int:
    """``--max-memory-per-child``: a plain number is KiB (as in Celery); ``200M``, ``1.5GiB``,
    ``512k`` are accepted too. Raises ValueError naming the bad value."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"can't read memory size {text!r}: use KiB, or a unit such as 200M or 1G")
    number, unit = float(match[1]), match[2].lower()
    return int(number * _UNIT_KIB[unit])
