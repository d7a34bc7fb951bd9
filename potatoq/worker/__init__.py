"""The worker: a prefork supervisor (or ``-P solo``) that claims, runs and settles tasks.

Layout, one job per module:

``options``     settings resolved from ``app.conf`` and the command line
``supervisor``  child processes, crash recovery, hard time limits, shutdown, recycling
``child``       the claim → execute → settle loop of one child (threads inside)
``executor``    one task run: retries, results, canvas follow-ups (the app layer's)
``chores``      heartbeat, recovery, lease extension, periodic scheduler, deferred settles
``scheduler``   periodic tasks, deduplicated through the broker (``potatoq beat`` too)
``limits``      soft time limits inside a task
``settling``    settles that survive a broker outage
``unrun``       claims a live process holds but doesn't run (their reply was lost)
``ipc``         what a child tells its supervisor
``procinfo``    usable CPUs and resident memory
``solo``        ``-P solo``: in-process, one task at a time
"""

from __future__ import annotations

from typing import Any

from .options import POOLS, WorkerOptions

__all__ = ["POOLS", "WorkerOptions", "run_worker"]


def run_worker(app: Any, options: WorkerOptions | None = None, **overrides: Any) -> int:
    """Run a worker for ``app`` in this process until shutdown; return its exit code.

    ``overrides`` are :meth:`WorkerOptions.from_app` keywords (``concurrency``, ``queues``,
    ``pool``, ``threads`` …) when ``options`` isn't given.
    """
    opts = options or WorkerOptions.from_app(app, **overrides)
    if opts.pool == "solo":
        from .solo import SoloWorker

        return SoloWorker(app, opts).run()
    from .supervisor import Supervisor

    return Supervisor(app, opts).run()
