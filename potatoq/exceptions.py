"""Exceptions raised by potatoq, with Celery's names so ``except`` clauses migrate as-is."""

from __future__ import annotations

from typing import Any


class PotatoqError(Exception):
    """Base class of every potatoq exception."""


class ImproperlyConfigured(PotatoqError):
    """A setting, URL or option is wrong; the message names which one."""


class OperationalError(PotatoqError):
    """The broker could not be reached within ``broker_connection_timeout``."""


class SerializationError(PotatoqError, TypeError):
    """A value can't be encoded as JSON; the message names the argument."""


class MessageDecodeError(PotatoqError, ValueError):
    """A message read from the broker can't be decoded; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MessageTooLarge(PotatoqError, ValueError):
    """An encoded message is larger than ``task_max_message_size``."""


class InvalidName(ImproperlyConfigured, ValueError):
    """A queue or task name that a broker can't store safely."""


class InvalidOption(ImproperlyConfigured, ValueError):
    """A sending option (priority, countdown, eta …) no broker can store; names which."""


class NotRegistered(PotatoqError, KeyError):
    """A message names a task this worker doesn't know."""

    def __str__(self) -> str:
        return f"task {self.args[0]!r} is not registered" if self.args else "task not registered"


class Retry(PotatoqError):
    """Raised by ``Task.retry()``: the task will run again later.

    Celery's signature: ``Retry(message=None, exc=None, when=None)``.
    """

    def __init__(
        self,
        message: str | None = None,
        exc: BaseException | None = None,
        when: float | None = None,
        **kwargs: Any,
    ) -> None:
        self.message = message
        self.exc = exc
        self.when = when
        super().__init__(message or (repr(exc) if exc else "retry"), exc, when)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.message, self.exc, self.when)


RetryTaskError = Retry


class MaxRetriesExceededError(PotatoqError):
    """``retry()`` was called after ``max_retries`` retries."""


class Ignore(PotatoqError):
    """Raised by a task: the worker records no state for this run (Celery's ``Ignore``)."""


class Reject(PotatoqError):
    """Raised by a task to reject its message (Celery's ``Reject(reason, requeue=False)``).

    ``requeue=False``: the task fails for good (FAILURE result, dead letter).
    ``requeue=True``: the message goes back on its queue and is delivered again; the
    delivery counts towards ``task_max_deliveries``, so a task that always rejects ends up
    dead-lettered instead of looping forever.
    """

    def __init__(self, reason: Any = None, requeue: bool = False) -> None:
        self.reason = reason
        self.requeue = requeue
        super().__init__(reason, requeue)


class TaskError(PotatoqError):
    """Base for errors about a task run."""


class TimeLimitExceeded(TaskError):
    """The hard time limit killed the process running the task."""


class SoftTimeLimitExceeded(TaskError):
    """Raised inside a task when its soft time limit is reached."""


class WorkerLostError(TaskError):
    """The process running the task died (SIGKILL, OOM, segfault, host loss)."""


class TaskRevokedError(TaskError):
    """The task was revoked before it ran."""


class ChordError(TaskError):
    """A task in a chord's header failed, so its callback didn't run."""


class StaleDelivery(PotatoqError):
    """A settle was refused: the claim was lost and the task delivered again."""


import builtins as _builtins  # noqa: E402


class TimeoutError(PotatoqError, _builtins.TimeoutError):  # noqa: A001 - Celery's name
    """``AsyncResult.get()`` gave up waiting."""


class ResultNotStored(PotatoqError):
    """``get()`` on a task whose result isn't stored (no result backend, ignore_result)."""


class IncompleteStream(PotatoqError):
    """Kept for Celery compatibility."""


class QueueNotFound(ImproperlyConfigured):
    """A task was routed to a queue that isn't defined."""
