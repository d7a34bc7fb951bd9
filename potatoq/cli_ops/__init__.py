"""The operations commands of ``potatoq``: one module per command, registered by ``cli.py``.

``status``, ``queues``, ``limits``, ``dead``, ``inspect``, ``call``, ``result``, ``revoke``, ``purge``,
``schedule`` and ``shell`` work on every broker (``control`` and ``events`` only answer
Celery's broadcast commands with what to use instead) through the broker contract only
(``workers()``, ``queue_stats()``, dead letters, ``revoke``, ``purge``, results), so a new
broker gets them by passing the contract suite. Shared pieces: ``session`` (app, broker,
exit codes, one-line errors) and ``output`` (tables, JSON, colors).
"""

from __future__ import annotations

from . import call, control, dead, inspect, limits, purge, queues, results, revoke, schedule, shell, status
from .session import Exit, Registrar

__all__ = ["Exit", "register"]

MODULES = (status, queues, limits, dead, inspect, call, results, revoke, purge, schedule, shell, control)


def register(command: Registrar) -> None:
    """Add every operations command through ``potatoq.cli.command``."""
    for module in MODULES:
        module.register(command)
