"""The request context a running task sees as ``self.request`` (Celery's ``Context``)."""

from __future__ import annotations

import contextvars
from typing import Any


class Context:
    """What is known about the current task run: id, retries, delivery count, eta, lineage."""

    id: str | None = None
    task: str | None = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | None = None
    retries: int = 0
    deliveries: int = 1
    delivery_count: int = 1
    eta: float | None = None
    expires: float | None = None
    parent_id: str | None = None
    root_id: str | None = None
    group: str | None = None
    group_index: int | None = None
    chord: dict[str, Any] | None = None
    chain: list[dict[str, Any]] | None = None
    callbacks: list[dict[str, Any]] | None = None
    errbacks: list[dict[str, Any]] | None = None
    headers: dict[str, Any] | None = None
    hostname: str | None = None
    is_eager: bool = False
    ignore_result: bool = False
    timelimit: tuple[float | None, float | None] = (None, None)
    delivery_info: dict[str, Any] | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    origin: str | None = None
    called_directly: bool = True

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    @classmethod
    def of(cls, fields: dict[str, Any]) -> Context:
        """A context whose attributes are ``fields``, taken as they are (not copied): a worker
        builds one per task, and ``Context(**fields)`` would copy the dict twice."""
        ctx = cls.__new__(cls)
        ctx.__dict__ = fields
        return ctx

    def update(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __repr__(self) -> str:
        return f"<Context: {self.__dict__!r}>"


# The stack of running tasks in this thread / coroutine (a task may call another directly).
_current: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar("potatoq_current", default=())


def push(task: Any, request: Context) -> contextvars.Token[tuple[Any, ...]]:
    return _current.set((*_current.get(), (task, request)))


def pop(token: contextvars.Token[tuple[Any, ...]]) -> None:
    _current.reset(token)


def current() -> tuple[Any, Context] | None:
    stack = _current.get()
    return stack[-1] if stack else None


def in_task() -> bool:
    """True inside a task run by a worker (not when called directly)."""
    top = current()
    return top is not None and not top[1].called_directly


class CurrentTask:
    """Celery's ``current_task``: the task running in this thread or coroutine, as a proxy.

    False (``if current_task:``) outside a task; attributes (``current_task.request.id``,
    ``current_task.name``) are the running task's.
    """

    def _get_current_object(self) -> Any:
        top = current()
        return None if top is None else top[0]

    def __bool__(self) -> bool:
        return current() is not None

    def __getattr__(self, name: str) -> Any:
        task = self._get_current_object()
        if task is None:
            raise AttributeError(f"no task is running here, so current_task has no {name!r}")
        return getattr(task, name)

    def __repr__(self) -> str:
        return f"<current_task: {self._get_current_object()!r}>"


current_task = CurrentTask()


# Set by ``Task.delay_on_commit``: follow the caller's transaction even where the task has
# ``enqueue_on_commit = False`` (read by the transaction glue in ``potatoq.contrib``).
follow_transaction: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "potatoq_follow_transaction", default=False
)
