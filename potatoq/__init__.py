"""potatoq: a distributed task queue with Celery's API that doesn't lose tasks."""

from __future__ import annotations

from . import states
from .app import Celery, Potatoq, current_app, shared_task
from .canvas import Signature, chain, chord, chunks, group, maybe_signature, signature, xmap, xstarmap
from .context import current_task
from .message import new_id
from .result import AsyncResult, EagerResult, GroupResult, ResultSet
from .task import Task

__version__ = "0.1.0"

subtask = signature


def uuid() -> str:
    """A new task id (Celery's ``celery.uuid``, for ``apply_async(task_id=uuid())``)."""
    return new_id()


__all__ = [
    "AsyncResult",
    "Celery",
    "EagerResult",
    "GroupResult",
    "Potatoq",
    "ResultSet",
    "Signature",
    "Task",
    "__version__",
    "chain",
    "chord",
    "chunks",
    "current_app",
    "current_task",
    "group",
    "maybe_signature",
    "shared_task",
    "signature",
    "states",
    "subtask",
    "uuid",
    "xmap",
    "xstarmap",
]
