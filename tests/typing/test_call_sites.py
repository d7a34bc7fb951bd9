"""Typed call sites: ``Task`` is generic over its function's parameters and return type.

``call_sites.py`` marks the lines a type checker must reject with ``# error``; both mypy and
pyright must report exactly those lines (and ``assert_type`` checks what calls return).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SAMPLE = HERE / "call_sites.py"


def expected_lines() -> set[int]:
    lines = SAMPLE.read_text().splitlines()
    return {number for number, line in enumerate(lines, 1) if line.rstrip().endswith("# error")}


def run(command: list[str]) -> str:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    return done.stdout + done.stderr


def reported(output: str, pattern: str) -> set[int]:
    return {int(m.group(1)) for m in re.finditer(pattern, output, re.MULTILINE)}


def test_the_sample_marks_errors() -> None:
    assert len(expected_lines()) >= 10


def test_mypy_reports_exactly_the_marked_lines() -> None:
    output = run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", "", str(SAMPLE)]
    )
    assert reported(output, r"call_sites\.py:(\d+): error") == expected_lines(), output


def test_pyright_reports_exactly_the_marked_lines() -> None:
    # The pyright package on PyPI bundles pyright itself and runs it with the system's node.
    output = run([sys.executable, "-m", "pyright", "--pythonpath", sys.executable, str(SAMPLE)])
    assert reported(output, r"call_sites\.py:(\d+):\d+ - error") == expected_lines(), output
