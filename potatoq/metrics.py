"""Prometheus metrics in the text exposition format, with no dependency.

Two sources:

* :func:`broker_metrics` reads the broker contract (``queue_stats``, ``workers``,
  ``list_dead``): queue depth, delayed and running tasks, age of the oldest waiting task
  per queue, live workers, running tasks, each node's processed count, dead letters. The
  dashboard serves it at ``/metrics``; any process that can reach the broker can.
* :class:`TaskMetrics` counts what workers do, from potatoq signals (never from inside the
  worker loop): ``task_prerun``/``task_postrun`` time each run into a histogram per task
  name, ``task_failure`` and ``task_retry`` count failures and retries. A prefork worker
  runs tasks in child processes, so each process writes its totals to a small JSON file in
  a directory shared by the worker (atomically, by rename), and the endpoint sums the files.

:func:`install_worker_endpoints` is the hook behind ``potatoq worker --metrics-port`` and
``--health-port``: a ``worker_init`` receiver that connects the signal receivers and starts
one HTTP thread in the worker's main process. That thread touches only its own objects and
the JSON files, never the broker, the logging module or stdout, because the supervisor
forks children while it runs and a child must not inherit a lock the thread holds.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

__all__ = [
    "BUCKETS",
    "CONTENT_TYPE",
    "HealthState",
    "TaskMetrics",
    "broker_metrics",
    "install_worker_endpoints",
    "parse_exposition",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)


# ----------------------------------------------------------------------------- exposition


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class Exposition:
    """Builds the text format: ``# HELP``/``# TYPE`` once per family, then its samples."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._seen: set[str] = set()

    def family(self, name: str, kind: str, help_text: str) -> None:
        if name not in self._seen:
            self._seen.add(name)
            self._lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        self._lines.append(f"{name}{_labels(labels or {})} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def parse_exposition(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse the simple text format this module writes: ``{(name, labels): value}``.

    For tests and quick scripts; it handles what :class:`Exposition` emits (no timestamps,
    no escaped quotes inside label values).
    """
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        labels: tuple[tuple[str, str], ...] = ()
        name = head
        if "{" in head:
            name, _, rest = head.partition("{")
            pairs = [p for p in rest.rstrip("}").split('",') if p]
            labels = tuple((k, v.strip('"')) for k, _, v in (p.partition("=") for p in pairs))
        out[(name, labels)] = float(value.replace("+Inf", "inf"))
    return out


# ----------------------------------------------------------------------------- from the broker


def broker_metrics(broker: Any, *, dead_letter_scan: int = 10000) -> str:
    """Queue and worker gauges read through the broker contract."""
    stats = broker.queue_stats()
    workers = broker.workers()
    out = Exposition()
    gauges = (
        ("potatoq_queue_waiting", "Tasks ready to run, per queue.", "waiting"),
        ("potatoq_queue_delayed", "Tasks due later (countdown, eta, retry backoff), per queue.", "delayed"),
        ("potatoq_queue_running", "Tasks claimed by a worker, per queue.", "running"),
    )
    for name, help_text, attr in gauges:
        out.family(name, "gauge", help_text)
        for s in stats:
            out.sample(name, getattr(s, attr), {"queue": s.queue})
    out.family(
        "potatoq_queue_oldest_waiting_age_seconds",
        "gauge",
        "Seconds since the oldest ready task of the queue became due (0 when none waits).",
    )
    for s in stats:
        out.sample(
            "potatoq_queue_oldest_waiting_age_seconds", s.oldest_waiting_age or 0.0, {"queue": s.queue}
        )
    paused = broker.paused_queues()
    out.family(
        "potatoq_queue_paused", "gauge", "1 while the queue is paused (potatoq queues pause), per queue."
    )
    for queue in sorted({s.queue for s in stats} | set(paused)):
        out.sample("potatoq_queue_paused", 1 if queue in paused else 0, {"queue": queue})
    out.family("potatoq_workers_live", "gauge", "Worker nodes with a recent heartbeat.")
    out.sample("potatoq_workers_live", len(workers))
    out.family("potatoq_tasks_running", "gauge", "Tasks the live workers report running.")
    out.sample("potatoq_tasks_running", sum(len(w.running) for w in workers))
    out.family(
        "potatoq_worker_processed_total",
        "counter",
        "Tasks finished by each worker node since it started (from its heartbeat).",
    )
    for w in workers:
        out.sample("potatoq_worker_processed_total", w.processed, {"node": w.node})
    out.family("potatoq_dead_letters", "gauge", "Dead letters kept by the broker.")
    out.sample("potatoq_dead_letters", len(broker.list_dead(limit=dead_letter_scan)))
    return out.text()


# ----------------------------------------------------------------------------- from signals


def _empty_task() -> dict[str, Any]:
    return {
        "processed": 0,
        "failed": 0,
        "retried": 0,
        "dead_lettered": 0,
        "sum": 0.0,
        "count": 0,
        "buckets": [0] * len(BUCKETS),
    }


class TaskMetrics:
    """Per task name counters and runtime histograms, fed by signals, shared through files.

    ``directory`` holds one ``<pid>.json`` per process that ran tasks; :meth:`render` sums
    them (files of exited children stay, so counters never go down while the worker runs).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._tasks: dict[str, dict[str, Any]] = {}
        self._started: dict[str, float] = {}

    # -- receivers (run in whichever process runs the task) ------------------------------------

    def connect(self) -> None:
        from . import signals

        signals.task_prerun.connect(self.on_prerun)
        signals.task_postrun.connect(self.on_postrun)
        signals.task_failure.connect(self.on_failure)
        signals.task_retry.connect(self.on_retry)

    def disconnect(self) -> None:
        from . import signals

        signals.task_prerun.disconnect(self.on_prerun)
        signals.task_postrun.disconnect(self.on_postrun)
        signals.task_failure.disconnect(self.on_failure)
        signals.task_retry.disconnect(self.on_retry)

    def _own(self) -> None:
        if self._pid != os.getpid():  # a forked child starts from zero, in its own file
            self._pid = os.getpid()
            self._lock = threading.Lock()
            self._tasks = {}
            self._started = {}

    def _entry(self, name: str) -> dict[str, Any]:
        return self._tasks.setdefault(name, _empty_task())

    def on_prerun(self, sender: Any = None, task_id: str = "", **_: Any) -> None:
        self._own()
        with self._lock:
            self._started[task_id] = time.monotonic()

    def on_postrun(self, sender: Any = None, task_id: str = "", **_: Any) -> None:
        self._own()
        name = str(getattr(sender, "name", sender))
        with self._lock:
            started = self._started.pop(task_id, None)
            entry = self._entry(name)
            entry["processed"] += 1
            if started is not None:
                runtime = time.monotonic() - started
                entry["sum"] += runtime
                entry["count"] += 1
                for i, bound in enumerate(BUCKETS):
                    if runtime <= bound:
                        entry["buckets"][i] += 1
        self._save()

    def on_failure(self, sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
        self._own()
        name = str(getattr(sender, "name", sender))
        throws = tuple(getattr(sender, "throws", None) or ())
        # The executor's rule: a failure the task declared in ``throws`` completes; any other
        # failure is dead-lettered.
        expected = bool(throws) and isinstance(exception, throws)
        with self._lock:
            entry = self._entry(name)
            entry["failed"] += 1
            if not expected:
                entry["dead_lettered"] += 1

    def on_retry(self, sender: Any = None, request: Any = None, **_: Any) -> None:
        self._own()
        name = str(getattr(sender, "name", sender))
        with self._lock:
            self._entry(name)["retried"] += 1
            task_id = getattr(request, "id", None)
            if task_id is not None:
                self._started.pop(task_id, None)  # a retry has no postrun
        self._save()

    def _save(self) -> None:
        with self._lock:
            body = json.dumps(self._tasks)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{os.getpid()}.json"
        tmp = path.with_suffix(f".tmp{threading.get_ident()}")
        tmp.write_text(body)
        os.replace(tmp, path)

    # -- reading (the endpoint's process) ------------------------------------------------------

    def totals(self) -> dict[str, dict[str, Any]]:
        merged: dict[str, dict[str, Any]] = {}
        for path in sorted(self.directory.glob("*.json")):
            try:
                body = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # replaced while reading: the next scrape sees it
            for name, entry in body.items():
                into = merged.setdefault(name, _empty_task())
                for key in ("processed", "failed", "retried", "dead_lettered", "sum", "count"):
                    into[key] += entry.get(key, 0)
                for i, n in enumerate(entry.get("buckets", [])[: len(BUCKETS)]):
                    into["buckets"][i] += n
        return merged

    def render(self) -> str:
        totals = self.totals()
        out = Exposition()
        counters = (
            ("potatoq_tasks_processed_total", "processed", "Task runs finished (success or failure)."),
            ("potatoq_tasks_failed_total", "failed", "Task runs that raised."),
            ("potatoq_tasks_retried_total", "retried", "Task runs that asked to be retried."),
            (
                "potatoq_tasks_dead_lettered_total",
                "dead_lettered",
                "Task runs that failed into the dead letters.",
            ),
        )
        for metric, key, help_text in counters:
            out.family(metric, "counter", help_text)
            for name, entry in sorted(totals.items()):
                out.sample(metric, entry[key], {"task": name})
        hist = "potatoq_task_runtime_seconds"
        out.family(hist, "histogram", "Run time of finished tasks, per task name.")
        for name, entry in sorted(totals.items()):
            for bound, n in zip(BUCKETS, entry["buckets"], strict=True):
                out.sample(f"{hist}_bucket", n, {"task": name, "le": _number(bound)})
            out.sample(f"{hist}_bucket", entry["count"], {"task": name, "le": "+Inf"})
            out.sample(f"{hist}_sum", entry["sum"], {"task": name})
            out.sample(f"{hist}_count", entry["count"], {"task": name})
        return out.text()


# ----------------------------------------------------------------------------- worker endpoints


class HealthState:
    """For probes: ``starting`` until ``worker_ready``, ``ok``, then ``stopping`` at ``worker_shutdown``.

    ``/healthz`` and ``/readyz`` answer 200 only when ok; ``/livez`` also while starting.
    """

    def __init__(self) -> None:
        self.state = "starting"

    def on_ready(self, sender: Any = None, **_: Any) -> None:
        self.state = "ok"

    def on_shutdown(self, sender: Any = None, **_: Any) -> None:
        self.state = "stopping"


def _handler(metrics: TaskMetrics | None, health: HealthState | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics" and metrics is not None:
                self._reply(200, metrics.render(), CONTENT_TYPE)
            elif path in ("/healthz", "/livez", "/readyz") and health is not None:
                ok = health.state == "ok" or (path == "/livez" and health.state == "starting")
                self._reply(200 if ok else 503, health.state + "\n", "text/plain; charset=utf-8")
            else:
                self._reply(404, "not found\n", "text/plain; charset=utf-8")

        def _reply(self, status: int, body: str, content_type: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            pass  # stderr's lock must never be held by this thread when the supervisor forks

    return Handler


class Endpoints:
    """The worker's HTTP thread(s): one server per distinct port."""

    def __init__(self) -> None:
        self.servers: list[HTTPServer] = []
        self.directory: str | None = None

    def start(self, host: str, ports: Iterable[tuple[int, TaskMetrics | None, HealthState | None]]) -> None:
        for port, metrics, health in ports:
            server = HTTPServer((host, port), _handler(metrics, health))
            self.servers.append(server)
            threading.Thread(
                target=server.serve_forever, name=f"potatoq-endpoints-{port}", daemon=True
            ).start()

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()
        self.servers = []
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)


def install_worker_endpoints(
    metrics_port: int | None,
    health_port: int | None,
    host: str = "127.0.0.1",
) -> Endpoints:
    """Connect a ``worker_init`` receiver that starts ``/metrics`` and ``/healthz`` servers.

    The same port may serve both; they listen on loopback unless ``host`` says otherwise
    (they have no authentication). Called by ``potatoq worker --metrics-port/--health-port``
    before the worker starts; the servers stop at ``worker_shutdown``.
    """
    from . import signals

    endpoints = Endpoints()
    health = HealthState()

    def on_init(sender: Any = None, **_: Any) -> None:
        metrics = None
        if metrics_port is not None:
            endpoints.directory = tempfile.mkdtemp(prefix="potatoq-metrics-")
            metrics = TaskMetrics(endpoints.directory)
            metrics.connect()  # forked children inherit the receivers
        if health_port is not None:
            signals.worker_ready.connect(health.on_ready)
        plan: dict[int, tuple[TaskMetrics | None, HealthState | None]] = {}
        if metrics_port is not None:
            plan[metrics_port] = (metrics, None)
        if health_port is not None:
            previous = plan.get(health_port, (None, None))[0]
            plan[health_port] = (previous, health)
        endpoints.start(host, [(port, m, h) for port, (m, h) in plan.items()])

    def on_shutdown(sender: Any = None, **_: Any) -> None:
        health.on_shutdown()
        with contextlib.suppress(Exception):
            endpoints.stop()

    signals.worker_init.connect(on_init)
    signals.worker_shutdown.connect(on_shutdown)
    return endpoints
