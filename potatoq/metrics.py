"""Prometheus metrics through ``prometheus_client`` (the ``[metrics]`` extra) and its
multiprocess mode.

Two sources:

* :func:`broker_metrics` reads the broker contract (``queue_stats``, ``workers``,
  ``list_dead``): queue depth, delayed and running tasks, age of the oldest waiting task
  per queue, live workers, running tasks, each node's processed count, dead letters,
  concurrency and rate limits. The dashboard serves it at ``/metrics``; any process that
  can reach the broker can.
* :class:`TaskMetrics` counts what workers do, from potatoq signals (never from inside the
  worker loop): ``task_prerun``/``task_postrun`` time each run into a histogram per task
  name and the wait between due and start into a histogram per queue, ``task_failure``
  and ``task_retry`` count failures and retries. A prefork worker runs tasks in child
  processes: ``prometheus_client``'s multiprocess mode gives each process its own
  memory-mapped files in one directory (``PROMETHEUS_MULTIPROC_DIR``), and the endpoint
  sums them with its ``MultiProcessCollector`` (files of exited children stay, so
  counters never go down while the worker runs).

:func:`install_worker_endpoints` is the hook behind ``potatoq worker --metrics-port`` and
``--health-port``: a ``worker_init`` receiver that connects the signal receivers and starts
one HTTP thread in the worker's main process. That thread touches only its own objects and
the metric files, never the broker, the logging module or stdout, because the supervisor
forks children while it runs and a child must not inherit a lock the thread holds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from .exceptions import ImproperlyConfigured

__all__ = [
    "BUCKETS",
    "CONTENT_TYPE",
    "LATENCY_BUCKETS",
    "HealthState",
    "TaskMetrics",
    "broker_metrics",
    "install_worker_endpoints",
    "parse_exposition",
]

#: The text format ``prometheus_client.generate_latest`` writes.
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
#: Enqueue-to-start latency: a backlog can keep a task waiting much longer than it runs.
LATENCY_BUCKETS: tuple[float, ...] = (*BUCKETS, 900.0, 3600.0, 4 * 3600.0)


def _prometheus() -> Any:
    """The ``prometheus_client`` module, or a clear error naming the extra to install."""
    try:
        import prometheus_client
        import prometheus_client.multiprocess
        import prometheus_client.values
    except ImportError:
        raise ImproperlyConfigured(
            "Prometheus metrics need the prometheus_client package: pip install 'potatoq[metrics]'"
        ) from None
    return prometheus_client


def parse_exposition(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse the text format: ``{(name, labels in their order, le last): value}``.

    For tests and quick scripts; it handles what ``prometheus_client`` writes for potatoq's
    metrics (no timestamps, no escaped quotes inside label values).
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
            found = [(k, v.strip('"')) for k, _, v in (p.partition("=") for p in pairs)]
            # a histogram's ``le`` last, wherever the writer put it (prometheus_client: first)
            labels = tuple(sorted(found, key=lambda kv: kv[0] == "le"))
        out[(name, labels)] = float(value.replace("+Inf", "inf"))
    return out


# ----------------------------------------------------------------------------- from the broker


class _BrokerCollector:
    """A ``prometheus_client`` collector reading the broker once per scrape."""

    def __init__(self, broker: Any, dead_letter_scan: int) -> None:
        self.broker = broker
        self.dead_letter_scan = dead_letter_scan

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = self.broker.queue_stats()
        workers = self.broker.workers()
        gauges = (
            ("potatoq_queue_waiting", "Tasks ready to run, per queue.", "waiting"),
            (
                "potatoq_queue_delayed",
                "Tasks due later (countdown, eta, retry backoff), per queue.",
                "delayed",
            ),
            ("potatoq_queue_running", "Tasks claimed by a worker, per queue.", "running"),
        )
        for name, help_text, attr in gauges:
            family = GaugeMetricFamily(name, help_text, labels=["queue"])
            for s in stats:
                family.add_metric([s.queue], getattr(s, attr))
            yield family
        # A count past the broker's exact-count cap is an estimate (potatoq.brokers.estimates):
        # 1 here for that queue and count, so a dashboard or alert can tell.
        estimated = GaugeMetricFamily(
            "potatoq_queue_count_estimated",
            "1 when potatoq_queue_waiting/delayed of the queue is an estimate (above the exact-count cap).",
            labels=["queue", "count"],
        )
        for s in stats:
            for count in ("waiting", "delayed"):
                estimated.add_metric([s.queue, count], 1 if count in s.estimated else 0)
        yield estimated
        age = GaugeMetricFamily(
            "potatoq_queue_oldest_waiting_age_seconds",
            "Seconds since the oldest ready task of the queue became due (0 when none waits).",
            labels=["queue"],
        )
        for s in stats:
            age.add_metric([s.queue], s.oldest_waiting_age or 0.0)
        yield age
        paused = self.broker.paused_queues()
        paused_family = GaugeMetricFamily(
            "potatoq_queue_paused",
            "1 while the queue is paused (potatoq queues pause), per queue.",
            labels=["queue"],
        )
        for queue in sorted({s.queue for s in stats} | set(paused)):
            paused_family.add_metric([queue], 1 if queue in paused else 0)
        yield paused_family
        yield GaugeMetricFamily("potatoq_workers_live", "Worker nodes with a recent heartbeat.", len(workers))
        yield GaugeMetricFamily(
            "potatoq_tasks_running",
            "Tasks the live workers report running.",
            sum(len(w.running) for w in workers),
        )
        processed = CounterMetricFamily(
            "potatoq_worker_processed",
            "Tasks finished by each worker node since it started (from its heartbeat).",
            labels=["node"],
        )
        for w in workers:
            processed.add_metric([w.node], w.processed)
        yield processed
        dead = len(self.broker.list_dead(limit=self.dead_letter_scan))
        yield GaugeMetricFamily("potatoq_dead_letters", "Dead letters kept by the broker.", dead)
        if self.broker.capabilities.concurrency_limits:
            yield from _limit_metrics(self.broker.limits())
        if self.broker.capabilities.rate_limits:
            yield from _rate_metrics(self.broker.rates())


def broker_metrics(broker: Any, *, dead_letter_scan: int = 10000) -> str:
    """Queue and worker gauges read through the broker contract, in the text format."""
    prometheus = _prometheus()
    registry = prometheus.CollectorRegistry(auto_describe=False)
    registry.register(_BrokerCollector(broker, dead_letter_scan))
    return str(prometheus.generate_latest(registry).decode())


def _limit_metrics(usage: Iterable[Any]) -> Iterator[Any]:
    """Cluster-wide concurrency limits (docs/limits.md): slots in use, the limit, waiters."""

    usage = list(usage)
    gauges = (
        ("potatoq_limit_running", "Running tasks holding a slot of the concurrency limit.", "running"),
        ("potatoq_limit_waiting", "Ready tasks waiting for a slot of the concurrency limit.", "waiting"),
        ("potatoq_limit_concurrency", "The concurrency limit in force (override or task option).", "limit"),
    )
    yield from _keyed_gauges(gauges, usage)


def _keyed_gauges(gauges: Iterable[tuple[str, str, str]], usage: list[Any]) -> Iterator[Any]:
    """One gauge family per (name, help, attribute), labelled by each usage row's key; a
    row whose attribute is None (no limit known) is left out of that family."""
    from prometheus_client.core import GaugeMetricFamily

    for name, help_text, attr in gauges:
        family = GaugeMetricFamily(name, help_text, labels=["key"])
        for u in usage:
            value = getattr(u, attr)
            if value is not None:
                family.add_metric([u.key], value)
        yield family


def _rate_metrics(usage: Iterable[Any]) -> Iterator[Any]:
    """Global rate limits (docs/limits.md): tokens left, tasks waiting, the rate and burst."""

    usage = list(usage)
    gauges = (
        ("potatoq_rate_tokens", "Tokens left now in the rate limit's bucket (0 to burst).", "tokens"),
        ("potatoq_rate_waiting", "Tasks waiting for a token of the rate limit.", "waiting"),
        (
            "potatoq_rate_per_second",
            "The rate in force, in tasks per second (override or task option).",
            "rate",
        ),
        ("potatoq_rate_burst", "How many tasks of the key may start at once.", "burst"),
    )
    yield from _keyed_gauges(gauges, usage)


# ----------------------------------------------------------------------------- from signals


class TaskMetrics:
    """Per task name counters and runtime histograms, per queue latency histograms, fed by
    signals and kept in ``prometheus_client``'s multiprocess files under ``directory``.

    Making one points ``PROMETHEUS_MULTIPROC_DIR`` at ``directory`` for this process (and
    the worker children it forks) until :meth:`disconnect`. Its metrics are its own
    objects, registered nowhere but read back by :meth:`render`, so a test can make several
    in one process.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        prometheus = _prometheus()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._saved_env = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(self.directory)
        # A value class of our own: its files live in *this* directory, whatever another
        # TaskMetrics of the process (a test) or prometheus_client's import-time choice did.
        self._value_class = prometheus.values.MultiProcessValue()
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}
        self._children: dict[tuple[str, str], Any] = {}
        counter, histogram = prometheus.Counter, prometheus.Histogram
        self._metrics: dict[str, Any] = {
            "processed": counter(
                "potatoq_tasks_processed", "Task runs finished (success or failure).", ["task"], registry=None
            ),
            "failed": counter("potatoq_tasks_failed", "Task runs that raised.", ["task"], registry=None),
            "retried": counter(
                "potatoq_tasks_retried", "Task runs that asked to be retried.", ["task"], registry=None
            ),
            "dead_lettered": counter(
                "potatoq_tasks_dead_lettered",
                "Task runs that failed into the dead letters.",
                ["task"],
                registry=None,
            ),
            "runtime": histogram(
                "potatoq_task_runtime_seconds",
                "Run time of finished tasks, per task name.",
                ["task"],
                buckets=BUCKETS,
                registry=None,
            ),
            "latency": histogram(
                "potatoq_task_latency_seconds",
                "Seconds from when a task was due (sent, or its eta) to its start, per queue.",
                ["queue"],
                buckets=LATENCY_BUCKETS,
                registry=None,
            ),
        }

    def _child(self, metric: str, label: str) -> Any:
        """The labelled child, made with this instance's value class (the global one is
        swapped only while a child is made, under the lock)."""
        key = (metric, label)
        child = self._children.get(key)
        if child is None:
            from prometheus_client import values

            with self._lock:
                child = self._children.get(key)
                if child is None:
                    saved, values.ValueClass = values.ValueClass, self._value_class
                    try:
                        child = self._children[key] = self._metrics[metric].labels(label)
                    finally:
                        values.ValueClass = saved
        return child

    def _task(self, name: str, metric: str) -> Any:
        """``metric``'s child for task ``name``; the first time a name is seen, every
        per-task series of it is made, so a task that never failed shows 0 failures."""
        if ("processed", name) not in self._children:
            for each in ("processed", "failed", "retried", "dead_lettered", "runtime"):
                self._child(each, name)
        return self._child(metric, name)

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
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR") == str(self.directory):  # as it was before
            if self._saved_env is None:
                del os.environ["PROMETHEUS_MULTIPROC_DIR"]
            else:
                os.environ["PROMETHEUS_MULTIPROC_DIR"] = self._saved_env

    def on_prerun(self, sender: Any = None, task_id: str = "", **_: Any) -> None:
        self._started[task_id] = time.monotonic()
        request = getattr(sender, "request", None)
        latency = _latency(request, time.time())
        if latency is not None:
            queue = str((getattr(request, "delivery_info", None) or {}).get("queue") or "")
            self._child("latency", queue).observe(latency)

    def on_postrun(self, sender: Any = None, task_id: str = "", **_: Any) -> None:
        name = str(getattr(sender, "name", sender))
        started = self._started.pop(task_id, None)
        self._task(name, "processed").inc()
        if started is not None:
            self._task(name, "runtime").observe(time.monotonic() - started)

    def on_failure(self, sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
        name = str(getattr(sender, "name", sender))
        throws = tuple(getattr(sender, "throws", None) or ())
        # The executor's rule: a failure the task declared in ``throws`` completes; any other
        # failure is dead-lettered.
        expected = bool(throws) and isinstance(exception, throws)
        self._task(name, "failed").inc()
        if not expected:
            self._task(name, "dead_lettered").inc()

    def on_retry(self, sender: Any = None, request: Any = None, **_: Any) -> None:
        name = str(getattr(sender, "name", sender))
        self._task(name, "retried").inc()
        task_id = getattr(request, "id", None)
        if task_id is not None:
            self._started.pop(task_id, None)  # a retry has no postrun

    # -- reading (the endpoint's process) ------------------------------------------------------

    def render(self) -> str:
        """Every process's files under ``directory``, summed, in the text format."""
        prometheus = _prometheus()
        registry = prometheus.CollectorRegistry(auto_describe=False)
        prometheus.multiprocess.MultiProcessCollector(registry, path=str(self.directory))
        return str(prometheus.generate_latest(registry).decode())


def _latency(request: Any, now: float) -> float | None:
    """Seconds since the task was due: sent (the ``sent_at`` header) or its eta, if later."""
    headers = getattr(request, "headers", None) or {}
    sent = headers.get("sent_at")
    if not isinstance(sent, int | float) or isinstance(sent, bool):
        return None
    eta = getattr(request, "eta", None)
    due = max(float(sent), float(eta)) if isinstance(eta, int | float) else float(sent)
    return max(0.0, now - due)


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

    if metrics_port is not None:
        _prometheus()  # a missing extra is refused now, and imported before any fork
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
