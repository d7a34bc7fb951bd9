"""PostgreSQL failover: the primary crashes mid-run, its synchronous standby is promoted.

A primary and a streaming standby (``pg_pair.py``) run with ``synchronous_commit=on`` and
``synchronous_standby_names='*'``: an enqueue or a settle returns only once the standby has
flushed it. Everything (producer, two workers of two children, their LISTEN connections)
uses one multi-host URL, standby first, with ``target_session_attrs=read-write``, so libpq
skips whichever server is read-only.

A producer thread sends 2,000 ``faults.record`` tasks one ``.delay()`` at a time while the
workers drain them; when about half have run, the primary is stopped in immediate mode (a
crash: no shutdown checkpoint, no last WAL sent) and the standby promoted. Afterwards:

* lost = 0: every task whose ``.delay()`` returned completed (a ``.delay()`` that raised
  during the failover is not counted: its caller was told);
* the same worker processes carried on: no restart, and their LISTEN connections came back
  through the same URL (a "LISTEN connection restored" line for each "LISTEN connection
  failed" one);
* a task ran twice only if it was claimed on the old primary (in flight at the crash; an
  idle worker's claim commits without waiting for the standby, by design): at most one
  such task per worker child, each run twice at most. (Whether its first run is on record
  before the promotion ends depends on how fast that child got the CPU: on a loaded
  machine the run of a task claimed just before the crash was recorded after it.)
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig
from potatoq.exceptions import OperationalError
from potatoq.states import SUCCESS
from tests import services

from . import proj, servers
from .harness import FaultEnv, client, report, wait_for
from .pg_pair import PG_BIN, PostgresPair

TASKS = 2000
WORKERS, CHILDREN = 2, 2
FAIL_OVER_AT = TASKS // 2  # recorded runs before the primary is crashed
WORK_MS = 10.0  # each task works this long, so that tasks are in flight at the crash
CONNECTION_TIMEOUT = 5.0  # a .delay() retries this long: longer than the failover takes


def require_pair() -> None:
    """Skip when a primary/standby pair can't run here (fail under ``CI=true``)."""
    reason = servers.available("postgres")
    if reason is None and not (PG_BIN / "pg_basebackup").exists():
        reason = f"{PG_BIN}/pg_basebackup not found"
    if reason is not None:
        if services.IN_CI:
            pytest.fail(f"PostgreSQL primary/standby pair: {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture
def pair() -> Iterator[PostgresPair]:
    require_pair()
    instance = PostgresPair(synchronous=True)
    try:
        instance.start()
        yield instance
    finally:
        instance.close()


class Producer(threading.Thread):
    """Sends ``count`` tasks one ``.delay()`` at a time; notes which returned and which raised."""

    def __init__(self, proj: object, count: int) -> None:
        super().__init__(daemon=True)
        self.proj, self.count = proj, count
        self.sent: list[str] = []
        self.refused: list[str] = []
        self.other: list[BaseException] = []

    def run(self) -> None:
        for n in range(self.count):
            try:
                self.sent.append(self.proj.record.delay(n, WORK_MS).id)  # type: ignore[attr-defined]
            except OperationalError as exc:
                self.refused.append(str(exc))
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.other.append(exc)


def test_standby_url_is_refused_as_read_only_with_a_hint(pair: PostgresPair, tmp_path) -> None:
    """A connection that lands on a standby (no target_session_attrs) is a connection error
    with the fix in it, retried like an outage, not a failed task."""
    primary = create_broker(BrokerConfig(url=pair.url(pair.primary_port)))
    primary.migrate()
    primary.close()
    wait_for(pair.caught_up, 60, "the standby to replay the schema")  # so the enqueue is what fails
    standby = create_broker(BrokerConfig(url=pair.url(pair.standby_port)))
    message = proj.app.make_message("faults.add", (1, 2))
    try:
        with pytest.raises(OperationalError, match="read-only server.*target_session_attrs=read-write"):
            standby.enqueue([message])
    finally:
        standby.close()
    multi = create_broker(BrokerConfig(url=pair.url(target_session_attrs="read-write")))
    try:
        multi.enqueue([message])  # standby listed first: libpq skips it for the primary
        assert multi.queue_stats()[0].waiting == 1
    finally:
        multi.close()


@pytest.mark.slow
def test_failover_to_promoted_standby_loses_no_task(pair: PostgresPair, tmp_path) -> None:
    url = pair.url(target_session_attrs="read-write")
    env = FaultEnv(
        tmp_path,
        BrokerConfig(url=url),
        "postgres",
        broker_connection_timeout=CONNECTION_TIMEOUT,
        worker_dead_after=30.0,  # recovery by heartbeat age must not be what brings tasks back
    )
    try:
        with client(env) as proj:
            app = proj.app
            app.broker.migrate()
            workers = [env.worker("-c", str(CHILDREN), "-l", "info") for _ in range(WORKERS)]
            wait_for(lambda: len(app.broker.workers()) == WORKERS, what="both workers' heartbeats")
            producer = Producer(proj, TASKS)
            started = time.monotonic()
            producer.start()
            wait_for(lambda: len(env.executions()) >= FAIL_OVER_AT, 120, f"{FAIL_OVER_AT} runs")
            crashed = time.monotonic()
            pair.fail_over()
            failover_seconds = time.monotonic() - crashed
            # Every run claimed on the old primary is on record by now (a child records a
            # run as it starts it; the promotion took longer): runs first recorded later
            # were claimed on the new primary, and must not run twice.
            before_promotion = len(env.executions())
            resumed_at = wait_for(
                lambda: len(env.executions()) > before_promotion and time.monotonic(),
                60,
                "a run after failover",
            )
            producer.join(120)
            assert not producer.is_alive(), "the producer is stuck"

            def missing() -> list[str] | None:
                try:
                    return [
                        i
                        for i in producer.sent
                        if (r := app.broker.get_result(i)) is None or r.state != SUCCESS
                    ]
                except OperationalError:  # this process's connection died with the primary: retry
                    return None

            with contextlib.suppress(AssertionError):
                wait_for(lambda: missing() == [], 90, "every sent task to complete")
            left = wait_for(lambda: (m := missing()) is not None and [m], 20, "a result read")[0]
            drained = time.monotonic() - started
            runs = env.executions()
            per_task = Counter(task_id for task_id, _, _ in runs)
            twice = {task_id: n for task_id, n in per_task.items() if n > 1}
            alive = [w.alive() for w in workers]
            # A LISTEN connection that saw the primary go comes back within seconds (it
            # retries every second); give it time before reading the logs.
            if "LISTEN connection failed" in env.logs():
                with contextlib.suppress(AssertionError):
                    wait_for(lambda: "LISTEN connection restored" in env.logs(), 30, "a LISTEN reconnect")
            logs = env.logs()
            dead = app.broker.list_dead(limit=100)
            figures = {
                "tasks_sent": len(producer.sent),
                "delay_refused": len(producer.refused),
                "lost": len(left),
                "tasks_run_twice": len(twice),
                "extra_executions": sum(n - 1 for n in twice.values()),
                "failover_seconds": round(failover_seconds, 2),
                "first_run_after_promotion_seconds": round(resumed_at - crashed - failover_seconds, 2),
                "listen_restored": logs.count("LISTEN connection restored"),
                # tasks in flight at the crash whose settle waited for the new primary
                "settles_retried": len(re.findall(r"settled \S+ after \d+ attempts", logs)),
                "run_seconds": round(drained, 1),
                "synchronous_commit": "on, synchronous_standby_names='*'",
            }
            report("postgres failover", "postgres", **figures)
            for worker in workers:
                worker.stop()
    finally:
        env.close(failed=True)  # the logs are printed only when -s or the test fails

    assert not producer.other, producer.other[:3]
    assert not left, f"{len(left)} tasks whose .delay() returned never completed: {left[:5]}; {figures}"
    assert not dead, [(d.id, d.reason) for d in dead[:5]]
    assert all(alive), "a worker died during the failover"
    # Every LISTEN connection that failed came back. (In two CI runs where the 2,000 tasks
    # drained in under 10 s, no worker logged a LISTEN failure at all: the assertion holds
    # for the connections that saw the failover.)
    failed_listens = logs.count("LISTEN connection failed")
    assert logs.count("LISTEN connection restored") >= failed_listens, (
        "a failed LISTEN connection never came back"
    )
    assert all(n == 2 for n in twice.values()), f"a task ran more than twice: {twice}"
    assert len(twice) <= WORKERS * CHILDREN, f"more tasks ran twice than were in flight: {figures}"


@pytest.mark.parametrize("synchronous", [True, False], ids=["synchronous", "asynchronous"])
def test_returned_enqueue_survives_failover_only_with_synchronous_replication(
    synchronous: bool, tmp_path, request: pytest.FixtureRequest
) -> None:
    """What ``synchronous_standby_names`` buys, made deterministic: the standby stops
    receiving WAL, a ``.delay()`` is made, the primary crashes and the standby is promoted.

    * synchronous: the ``.delay()`` can't return while the standby lacks it (its commit waits
      in ``SyncRep``); it returns after the failover, retried on the new primary, which then
      holds the task.
    * asynchronous: the ``.delay()`` returns at once, and the promoted standby never saw the
      task: an acknowledged enqueue is lost. This is the trade-off the docs state.
    """
    require_pair()
    pair = PostgresPair(synchronous=synchronous)
    request.addfinalizer(pair.close)
    pair.start()
    env = FaultEnv(
        tmp_path,
        BrokerConfig(url=pair.url(target_session_attrs="read-write")),
        "postgres",
        broker_connection_timeout=20.0,
    )
    with client(env) as proj:
        app = proj.app
        app.broker.migrate()
        wait_for(pair.caught_up, 60, "the standby to replay the schema")
        pair.detach_standby()
        sent: list[str] = []
        errors: list[BaseException] = []

        def send() -> None:
            try:
                sent.append(proj.add.delay(1, 2).id)
            except BaseException as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)

        producer = threading.Thread(target=send, daemon=True)
        producer.start()
        if synchronous:
            wait_for(pair.waiting_for_standby, 60, "the enqueue's commit to wait for the standby")
            assert not sent, "the enqueue returned before the standby had it"
        else:
            producer.join(60)
            assert sent, errors
        pair.crash_primary()
        pair.promote()
        producer.join(60)
        assert not errors, errors
        assert len(sent) == 1

        def waiting() -> list[int] | None:
            try:
                return [sum(s.waiting for s in app.broker.queue_stats())]
            except OperationalError:  # this thread's connection died with the primary
                return None

        found = wait_for(waiting, 30, "a read from the promoted standby")[0]
    assert found == (1 if synchronous else 0)
