"""Loggers for task modules (Celery's ``celery.utils.log``).

``get_task_logger(__name__)`` returns a child of the ``potatoq.task`` logger, so task
modules' log lines go wherever the worker sends its task log (``-l info``) and can be
configured in one place.
"""

from __future__ import annotations

import logging

__all__ = ["get_logger", "get_task_logger"]

TASK_LOGGER = "potatoq.task"


def get_logger(name: str) -> logging.Logger:
    """A plain logger (``logging.getLogger``), as Celery's ``get_logger``."""
    return logging.getLogger(name)


def get_task_logger(name: str) -> logging.Logger:
    """A logger for a module of tasks: ``potatoq.task.<name>``."""
    if name in (TASK_LOGGER, "celery.task"):
        return logging.getLogger(TASK_LOGGER)
    return logging.getLogger(f"{TASK_LOGGER}.{name}")
