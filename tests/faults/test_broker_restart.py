"""Broker restarts: a private server stopped and started again mid-run, twice; nothing is lost.

Each server broker (Redis, PostgreSQL, RabbitMQ) gets a private instance on its own port
(``servers.py``). Two workers of
two children process ``faults.record`` tasks that a producer thread sends one at a time
while the test stops the server, keeps it down for a few seconds and starts it again: the
first time cleanly, the second time abruptly (SIGKILL for Redis, an immediate shutdown for
PostgreSQL). During an outage ``.delay()`` either succeeds once the server is back or raises
``OperationalError`` within about ``broker_connection_timeout``. Afterwards every task whose
``.delay()`` returned completes (lost = 0), the workers are still the same processes, and
they say the broker was unreachable a bounded number of times per outage (with backoff, not
a line per poll).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator

import pytest

from potatoq.brokers import broker_class, create_broker
from potatoq.brokers.base import BrokerConfig
from potatoq.exceptions import OperationalError
from potatoq.states import SUCCESS
from tests import services

from . import servers
from .harness import FaultEnv, client, report, sized, wait_for

CONNECTION_TIMEOUT = 2.0
OUTAGE = 3.0  # seconds each server stays down: longer than CONNECTION_TIMEOUT
RESUME_WITHIN = 30.0  # a task sent right after a restart completes within this
# Log lines about the broker being away: backoff (0.1 s doubling to 5 s) keeps them to a
# handful per process and outage.
UNREACHABLE = re.compile(
    r"unreachable|can.t reach|reachable again|LISTEN connection|claims work again|lost \(.*reconnecting",
    re.IGNORECASE,
)


PRIVATE = {
    "redis": servers.PrivateRedis,
    "postgres": servers.PrivatePostgres,
    "rabbitmq": servers.PrivateRabbitMQ,
}


@pytest.fixture(params=list(PRIVATE))
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, object]]:
    reason = servers.available(request.param)
    if reason is not None:
        if services.IN_CI:
            pytest.fail(f"private {request.param} server: {reason}", pytrace=False)
        pytest.skip(reason)
    instance = PRIVATE[request.param]()
    instance.start()
    try:
        yield request.param, instance
    finally:
        instance.close()


class Producer(threading.Thread):
    """Sends ``faults.record`` tasks one by one until stopped; notes what each ``.delay()`` did."""

    def __init__(self, proj: object, every: float) -> None:
        super().__init__(daemon=True)
        self.proj = proj
        self.every = every
        self.stopping = threading.Event()
        self.sent: list[str] = []
        self.refused: list[tuple[float, str]] = []  # (seconds the call took, error)
        self.other: list[BaseException] = []
        self.slowest = 0.0  # the longest .delay() call, successful or not

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self.sent.append(self.proj.record.delay(n, 5).id)  # type: ignore[attr-defined]
            except OperationalError as exc:
                self.refused.append((time.monotonic() - started, str(exc)))
            except BaseException as exc:
                self.other.append(exc)
            self.slowest = max(self.slowest, time.monotonic() - started)
            n += 1
            self.stopping.wait(self.every)


@pytest.mark.slow
def test_broker_restarts_lose_no_task(server: tuple[str, object], tmp_path) -> None:
    name, instance = server
    backend = None
    if not broker_class(instance.url).capabilities.stores_results:  # type: ignore[attr-defined]
        backend = create_broker(BrokerConfig(url=f"sqlite:///{tmp_path / 'results.sqlite3'}"))
        backend.migrate()  # RabbitMQ keeps results in a separate store: a SQLite file here
    env = FaultEnv(
        tmp_path,
        BrokerConfig(url=instance.url, result_backend=backend),  # type: ignore[attr-defined]
        name,
        broker_connection_timeout=CONNECTION_TIMEOUT,
        worker_dead_after=20.0,
    )
    restarts = sized(2, 3)
    try:
        with client(env) as proj:
            workers = [env.worker("-c", "2", "-l", "info") for _ in range(2)]
            wait_for(lambda: len(proj.app.broker.workers()) == 2, what="both workers' heartbeats")
            producer = Producer(proj, every=0.02)
            started = time.monotonic()
            producer.start()
            outages: list[tuple[str, float]] = []
            longest_stop = 0.0  # seconds the slowest stop() took: a call in flight waits for it
            resumed: list[float] = []
            for round_no in range(restarts):
                time.sleep(1.5)  # let work flow
                how = "clean" if round_no % 2 == 0 else "kill"
                down = time.monotonic()
                instance.stop(how)  # type: ignore[attr-defined]
                longest_stop = max(longest_stop, time.monotonic() - down)
                time.sleep(OUTAGE)
                instance.start()  # type: ignore[attr-defined]
                outages.append((how, round(time.monotonic() - down, 1)))
                # the workers are back: a task sent now completes soon
                back = time.monotonic()
                probe = proj.add.delay(round_no, 1)
                assert probe.get(timeout=RESUME_WITHIN) == round_no + 1
                resumed.append(round(time.monotonic() - back, 1))
            time.sleep(1.5)
            producer.stopping.set()
            producer.join(30)
            sent_at_end = time.monotonic()

            backend = proj.app.broker

            def missing() -> list[str] | None:
                try:
                    return [
                        i for i in producer.sent if (r := backend.get_result(i)) is None or r.state != SUCCESS
                    ]
                except (
                    OperationalError
                ):  # this process's connection died with the server: next call reconnects
                    return None

            with contextlib.suppress(AssertionError):
                wait_for(lambda: missing() == [], 60, "every sent task to complete")
            left = wait_for(lambda: (m := missing()) is not None and [m], 10, "a result read")[0]
            drained = time.monotonic() - sent_at_end
            alive = [w.alive() for w in workers]
            lines = [line for w in workers for line in w.output().splitlines() if UNREACHABLE.search(line)]
            figures = {
                "tasks_sent": len(producer.sent),
                "delay_refused": len(producer.refused),
                "slowest_delay_seconds": round(producer.slowest, 2),
                "resumed_after_seconds": resumed,
                "restarts": len(outages),
                "outages": [f"{how} {secs}s" for how, secs in outages],
                "longest_stop_seconds": round(longest_stop, 1),
                "lost": len(left),
                "drain_seconds": round(drained, 1),
                "unreachable_log_lines": len(lines),
                "run_seconds": round(sent_at_end - started, 1),
            }
            report("broker restart", name, **figures)
            for worker in workers:
                worker.stop()
    finally:
        env.close(failed=True)  # the logs are printed only when -s or the test fails

    assert not producer.other, producer.other[:3]
    assert not left, f"{len(left)} sent tasks never completed: {left[:5]}"
    assert all(alive), "a worker died during the restarts"
    assert producer.sent
    for _, error in producer.refused:
        assert "can't reach the broker" in error, error
    # .delay() retries for broker_connection_timeout, then raises: no call takes much longer.
    # A statement the server accepted before its stop began gets its answer only when the
    # server's shutdown gets to it (a commit in an fsync on a busy disk: a clean stop once
    # took 7 s here), so the bound allows the slowest stop on top.
    bound_delay = CONNECTION_TIMEOUT + 2.0 + longest_stop
    assert producer.slowest <= bound_delay, (
        f"a .delay() took {producer.slowest:.1f}s (bound {bound_delay:.1f}s, stop {longest_stop:.1f}s)"
    )
    # Logged once per outage: per process (2 supervisors, 4 children) and outage, the first
    # failure and the recovery of claims / heartbeats / the LISTEN connection, plus one line
    # per task whose settle had to wait. Not a line per retry.
    bound = len(outages) * (6 * 4 + 4)
    assert len(lines) <= bound, "\n".join(lines[:60])
