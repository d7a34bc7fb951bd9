"""The systems that ``benchmarks.run`` measures: one small module per system.

Each module defines the same two tasks with that system's own API (``noop(i)`` reports its
completion, ``stamp(sent)`` reports how late it started; both through
:mod:`benchmarks.record`) and two producer functions:

* ``send(task, *args)``: one enqueue call, the way an application sends one task;
* ``send_many(task, args_list)``: the system's batch or group API, or ``None`` where it has
  none;
* optionally ``send_later(task, countdown, *args)``: one enqueue of a task due in
  ``countdown`` seconds (potatoq only: the ETA-lateness stage);
* optionally ``prepare()``: import what the first send would import lazily (potatoq's
  broker client library, kombu's transport), without connecting; the producer calls it
  before it starts the clock.

The broker URL comes from ``BENCH_URL`` (set by the harness for each run), so one module
serves every broker the system supports. Peers run with their defaults.
"""

from __future__ import annotations

import os


def url() -> str:
    return os.environ["BENCH_URL"]
