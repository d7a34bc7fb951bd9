"""/metrics from the broker, task counters from signals, and the worker's --metrics-port/--health-port."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from potatoq import Potatoq
from potatoq.metrics import CONTENT_TYPE, TaskMetrics, parse_exposition
from potatoq.testing import drain
from tests.worker.conftest import Env, wait_for

from .conftest import ATTEMPTS


def _lines_are_exposition(text: str) -> None:
    """Every line is a comment (# HELP/# TYPE) or ``name{labels} value``."""
    import re

    sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_]+="[^"]*",?)*\})? [-+0-9.eEInf]+$')
    for line in text.strip().splitlines():
        assert line.startswith(("# HELP ", "# TYPE ")) or sample.match(line), line


def test_dashboard_metrics_from_the_broker(app: Potatoq, board: Any) -> None:
    for n in range(3):
        app.tasks["demo.add"].delay(n, n)
    app.tasks["demo.add"].apply_async((0, 0), queue="slow", countdown=600)
    response = board().get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"] == CONTENT_TYPE
    _lines_are_exposition(response.text)
    values = parse_exposition(response.text)
    assert values[("potatoq_queue_waiting", (("queue", "default"),))] == 3
    assert values[("potatoq_queue_delayed", (("queue", "slow"),))] == 1
    assert values[("potatoq_queue_oldest_waiting_age_seconds", (("queue", "default"),))] >= 0
    assert values[("potatoq_workers_live", ())] == 0
    assert values[("potatoq_tasks_running", ())] == 0
    assert values[("potatoq_dead_letters", ())] == 0


def test_task_counters_and_runtime_histogram_from_signals(app: Potatoq, tmp_path: Path) -> None:
    metrics = TaskMetrics(tmp_path / "metrics")
    metrics.connect()
    try:
        app.tasks["demo.add"].delay(1, 2)
        app.tasks["demo.add"].delay(3, 4)
        app.tasks["demo.flaky"].delay("x")
        drain(app)
    finally:
        metrics.disconnect()
    text = metrics.render()
    _lines_are_exposition(text)
    values = parse_exposition(text)
    add, flaky = (("task", "demo.add"),), (("task", "demo.flaky"),)
    assert values[("potatoq_tasks_processed_total", add)] == 2
    assert values[("potatoq_tasks_processed_total", flaky)] == 1
    assert values[("potatoq_tasks_failed_total", flaky)] == 1
    assert values[("potatoq_tasks_dead_lettered_total", flaky)] == 1
    assert values[("potatoq_tasks_failed_total", add)] == 0
    assert values[("potatoq_task_runtime_seconds_count", add)] == 2
    assert values[("potatoq_task_runtime_seconds_bucket", (("task", "demo.add"), ("le", "+Inf")))] == 2
    assert values[("potatoq_task_runtime_seconds_sum", add)] >= 0
    pid = __import__("os").getpid()  # prometheus_client's multiprocess files, one set per process
    assert sorted(p.name for p in (tmp_path / "metrics").iterdir()) == [
        f"counter_{pid}.db",
        f"histogram_{pid}.db",
    ]
    ATTEMPTS.clear()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_worker_metrics_and_health_ports(env: Env, client: Any) -> None:
    """A real prefork worker: children's counters summed on --metrics-port, probes on --health-port."""
    metrics_port, health_port = _free_port(), _free_port()
    worker = env.worker(
        "-c",
        "2",
        "--metrics-port",
        str(metrics_port),
        "--health-port",
        str(health_port),
        "--endpoints-host",
        "127.0.0.1",
    )
    health = f"http://127.0.0.1:{health_port}"
    wait_for(lambda: _get(health + "/healthz")[0] == 200, what="worker ready on /healthz")
    assert _get(health + "/livez")[0] == 200
    results = [client.add.delay(n, n) for n in range(6)]
    assert [r.get(timeout=30) for r in results] == [0, 2, 4, 6, 8, 10]

    def processed() -> float:
        status, text = _get(f"http://127.0.0.1:{metrics_port}/metrics")
        if status != 200:
            return 0.0
        return parse_exposition(text).get(("potatoq_tasks_processed_total", (("task", "proj.add"),)), 0.0)

    wait_for(lambda: processed() == 6, what="6 processed in /metrics")
    assert _get(f"http://127.0.0.1:{metrics_port}/nothing")[0] == 404
    assert worker.stop() == 0


def _outside_address() -> str | None:
    """An address of this machine that isn't loopback (the one a route to the outside uses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_worker_endpoints_listen_on_loopback_only_by_default(env: Env) -> None:
    outside = _outside_address()
    if outside is None:
        import pytest

        pytest.skip("this machine has no non-loopback IPv4 address to try")
    port = _free_port()
    worker = env.worker("--health-port", str(port))
    wait_for(lambda: _get(f"http://127.0.0.1:{port}/healthz")[0] == 200, what="worker ready on /healthz")
    with socket.socket() as s:
        s.settimeout(10)
        assert s.connect_ex((outside, port)) != 0, f"the health port answers on {outside}"
    assert worker.stop() == 0


def test_enqueue_to_start_latency_histogram_per_queue(app: Potatoq, tmp_path: Path) -> None:
    metrics = TaskMetrics(tmp_path / "metrics")
    metrics.connect()
    try:
        app.tasks["demo.add"].delay(1, 2)
        app.tasks["demo.add"].apply_async((3, 4), queue="slow")
        app.tasks["demo.add"].apply_async((5, 6), queue="slow")
        drain(app, queues=["default", "slow"])
    finally:
        metrics.disconnect()
    text = metrics.render()
    _lines_are_exposition(text)
    values = parse_exposition(text)
    assert values[("potatoq_task_latency_seconds_count", (("queue", "default"),))] == 1
    assert values[("potatoq_task_latency_seconds_count", (("queue", "slow"),))] == 2
    assert values[("potatoq_task_latency_seconds_bucket", (("queue", "slow"), ("le", "+Inf")))] == 2
    assert values[("potatoq_task_latency_seconds_sum", (("queue", "slow"),))] >= 0
