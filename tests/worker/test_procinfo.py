"""CPU count from affinity and cgroup quota; memory sizes."""

from __future__ import annotations

import os

import pytest

from potatoq.worker.procinfo import available_cpus, cgroup_cpu_limit, parse_size_kib, rss_kib


def _cgroup_v2(root, path: str, cpu_max: dict[str, str]):
    for rel, value in cpu_max.items():
        directory = root / rel
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cpu.max").write_text(value)
    return f"0::/{path}\n"


def test_cgroup_v2_quota_is_the_tightest_along_the_path(tmp_path):
    membership = _cgroup_v2(tmp_path, "a/b", {"": "max 100000", "a": "150000 100000", "a/b": "400000 100000"})
    assert cgroup_cpu_limit(tmp_path, membership) == 1.5


def test_cgroup_v2_without_a_quota(tmp_path):
    membership = _cgroup_v2(tmp_path, "x", {"x": "max 100000"})
    assert cgroup_cpu_limit(tmp_path, membership) is None


def test_cgroup_v1_quota(tmp_path):
    directory = tmp_path / "cpu" / "docker" / "abc"
    directory.mkdir(parents=True)
    (directory / "cpu.cfs_quota_us").write_text("200000\n")
    (directory / "cpu.cfs_period_us").write_text("100000\n")
    membership = "12:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n"
    assert cgroup_cpu_limit(tmp_path, membership) == 2.0


def test_available_cpus_respects_affinity():
    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))


def test_rss_of_this_process_is_plausible():
    assert 1024 < rss_kib() < 10 * 1024 * 1024


@pytest.mark.parametrize(
    ("text", "kib"),
    [
        ("200000", 200000),
        ("512k", 512),
        ("200M", 204800),
        ("1.5G", 1572864),
        ("1GiB", 1048576),
        ("64MB", 65536),
    ],
)
def test_memory_sizes(text, kib):
    assert parse_size_kib(text) == kib


def test_bad_memory_size_is_named():
    with pytest.raises(ValueError, match="'lots'"):
        parse_size_kib("lots")
