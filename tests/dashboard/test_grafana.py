"""docs/grafana/potatoq-dashboard.json queries only series potatoq exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from potatoq import Potatoq
from potatoq.metrics import TaskMetrics, broker_metrics, parse_exposition
from potatoq.testing import drain

BOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "potatoq-dashboard.json"


def test_every_series_the_grafana_dashboard_queries_exists(app: Potatoq, tmp_path: Path) -> None:
    board = json.loads(BOARD.read_text())
    queried = {
        name
        for panel in board["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bpotatoq_[a-z_]+", target["expr"])
    }
    metrics = TaskMetrics(tmp_path / "metrics")
    metrics.connect()
    try:
        app.tasks["demo.add"].delay(1, 2)
        drain(app)
    finally:
        metrics.disconnect()
    text = metrics.render() + broker_metrics(app.broker)
    exposed = {name for name, _ in parse_exposition(text)}
    for family in re.findall(r"^# TYPE (\w+) ", text, re.M):  # families with no sample yet (no worker)
        exposed |= {family + suffix for suffix in ("", "_total", "_bucket", "_sum", "_count")}
    assert sorted(queried - exposed) == []
    assert {"potatoq_task_latency_seconds_bucket", "potatoq_queue_waiting"} <= queried
