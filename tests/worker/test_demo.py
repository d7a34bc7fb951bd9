"""``potatoq demo`` runs a real worker, finishes the mix and exits 0."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow


def test_demo_runs_the_mix_and_exits_zero():
    done = subprocess.run(
        [sys.executable, "-m", "potatoq.cli", "demo"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("  ok  ") == 5
    assert "BAD" not in done.stdout
    database = re.search(r"database:\s+(\S+)", done.stdout)
    assert database is not None and os.path.exists(database[1])
    shutil.rmtree(os.path.dirname(database[1]))
