"""potatoq with its defaults; run by a real worker:
``python -m potatoq.cli -A benchmarks.peers.potatoq_app worker -c 2``.

``BENCH_TRANSPORT_OPTIONS`` (JSON) passes ``broker_transport_options``, e.g. a RabbitMQ
queue prefix so the harness can remove everything it declared afterwards.
``BENCH_TASK_HISTORY=0`` turns task history off (to measure what it costs).
``BENCH_PREFETCH_MULTIPLIER`` sets ``worker_prefetch_multiplier`` (honoured on RabbitMQ).
``BENCH_LIMITED=K``: ``setup()`` first sends K ``held`` tasks under a rate limit of 1/h into
the same queue (one runs, the others wait on the limit for the whole run), to measure what
tasks waiting on a limit cost the unlimited ``noop`` tasks around them.
``BENCH_RESULT_BACKEND`` sets ``result_backend`` (RabbitMQ keeps limits there), with
``task_ignore_result`` so that no result is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from potatoq import Potatoq, group

from .. import record
from . import url

app = Potatoq(
    "bench",
    broker=url(),
    broker_transport_options=json.loads(os.environ.get("BENCH_TRANSPORT_OPTIONS") or "{}"),
    task_history=os.environ.get("BENCH_TASK_HISTORY", "1") != "0",
)
if os.environ.get("BENCH_RESULT_BACKEND"):
    app.conf.result_backend = os.environ["BENCH_RESULT_BACKEND"]
    app.conf.task_ignore_result = True
if os.environ.get("BENCH_PREFETCH_MULTIPLIER"):
    app.conf.worker_prefetch_multiplier = int(os.environ["BENCH_PREFETCH_MULTIPLIER"])


@app.task(name="noop")
def noop(i: int) -> None:
    record.done()


@app.task(name="stamp")
def stamp(sent: float) -> None:
    record.started(sent)


@app.task(name="held", global_rate_limit="1/h")
def held() -> None:
    pass


TASKS = {"noop": noop, "stamp": stamp}


def setup() -> None:
    """Before the clock starts: the ``BENCH_LIMITED`` tasks that wait on a limit."""
    count = int(os.environ.get("BENCH_LIMITED") or 0)
    if count:
        group(held.s() for _ in range(count)).apply_async()


def prepare() -> None:
    """Make the broker object (importing its client library) without connecting."""
    _ = app.broker


def send(task: str, *args: Any) -> None:
    TASKS[task].delay(*args)


def send_later(task: str, countdown: float, *args: Any) -> None:
    """One task due in ``countdown`` seconds, as ``apply_async(countdown=...)`` sends it."""
    TASKS[task].apply_async(args, countdown=countdown)


def send_many(task: str, args_list: Sequence[Sequence[Any]], **options: Any) -> None:
    """One group: one broker enqueue call for all of its messages."""
    group(TASKS[task].s(*args) for args in args_list).apply_async(**options)
