"""A backend for Django's built-in tasks framework (``django.tasks``, Django 6+)::

    TASKS = {"default": {"BACKEND": "potatoq.contrib.django.tasks.PotatoqBackend",
                         "QUEUES": ["default", "emails"]}}

A Django task is sent as one potatoq task, :data:`RUNNER_NAME`, whose arguments name the
Django task (its module path) and carry its arguments, so the same workers run Django tasks
and ``@shared_task`` tasks (consume the Django queue names: ``-Q default,emails``). Django's
``queue_name`` is the potatoq queue, ``priority`` (-100…100, higher first) the potatoq
priority, ``run_after`` the ETA (kept by the broker). Enqueueing inside
``transaction.atomic()`` follows the transaction like any ``.delay()``.

Results: what ``get_result()`` needs is stored as the task goes: a ``READY`` record under
``django-enqueued:<id>`` when the task is sent (after COMMIT inside ``atomic``, so a rolled
back task has none and ``get_result`` raises ``TaskResultDoesNotExist``); the running
attempt's record (``RUNNING``, with the worker ids); then the outcome, written by the worker
in the same step that settles the task. ``task_enqueued`` is sent by the caller,
(after COMMIT inside ``atomic``), ``task_started`` and ``task_finished`` by the worker.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.tasks import TaskContext, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task as DjangoTask
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from potatoq import states
from potatoq.app import shared_task
from potatoq.brokers.base import ResultRecord
from potatoq.task import Task

from . import get_app

__all__ = ["RUNNER_NAME", "DjangoTaskFailed", "PotatoqBackend"]

#: The potatoq task that runs Django tasks.
RUNNER_NAME = "potatoq.django_task"
ENQUEUED_PREFIX = "django-enqueued:"


class DjangoTaskFailed(Exception):
    """A Django task raised; ``args[1]`` is its task result as data (stored as the failure)."""


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _now() -> datetime:
    return datetime.now(UTC)


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _load(path: str) -> DjangoTask:
    found = import_string(path)
    if not isinstance(found, DjangoTask):
        raise TypeError(f"{path!r} is not a django.tasks Task (decorate it with @task)")
    return found


class PotatoqBackend(BaseTaskBackend):  # type: ignore[misc]
    """Django's task backend interface, on potatoq's broker and workers."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def enqueue(self, task: DjangoTask, args: Sequence[Any], kwargs: Mapping[str, Any]) -> TaskResult:
        self.validate_task(task)
        app = get_app()
        enqueued_at = _now()
        meta = {
            "path": task.module_path,
            "backend": self.alias,
            "args": normalize_json(list(args)),
            "kwargs": normalize_json(dict(kwargs)),
            "priority": task.priority,
            "queue": task.queue_name,
            "run_after": _iso(task.run_after),
            "takes_context": task.takes_context,
            "enqueued_at": _iso(enqueued_at),
            "worker_ids": [],
        }
        sent = app.signature(
            RUNNER_NAME, (meta,), queue=task.queue_name, priority=task.priority, eta=task.run_after
        ).apply_async()
        result = _task_result(task, sent.id, TaskResultStatus.READY, meta, self.alias)

        def enqueued() -> None:
            _store(ResultRecord(task_id=ENQUEUED_PREFIX + sent.id, state="READY", result=meta))
            task_enqueued.send(type(self), task_result=result)

        _after_commit(enqueued)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        backend = get_app().backend
        if backend is None:
            raise TaskResultDoesNotExist(result_id)
        record = backend.get_result(result_id)
        enqueued = (
            None if record is not None and _meta(record) else backend.get_result(ENQUEUED_PREFIX + result_id)
        )
        meta = _meta(record) if record is not None else None
        if meta is None and enqueued is not None:
            meta = dict(enqueued.result or {})
        if meta is None:
            raise TaskResultDoesNotExist(result_id)
        task = _load(str(meta["path"])).using(
            priority=meta.get("priority"),
            queue_name=meta.get("queue"),
            run_after=_time(meta.get("run_after")),
        )
        status, value = _status(record)
        if status is TaskResultStatus.FAILED and not meta.get("errors") and record is not None:
            meta["errors"] = [_error_of(record)]  # e.g. WorkerLostError: the worker died mid-task
            meta.setdefault("finished_at", _iso(_date(record.date_done)))
        result = _task_result(task, result_id, status, meta, self.alias)
        if status is TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", value)
        return result


def _after_commit(callback: Any) -> None:
    from django.db import connections, transaction

    from .setup import database_alias

    alias = database_alias()
    if connections[alias].in_atomic_block:
        transaction.on_commit(callback, using=alias)
    else:
        callback()


def _store(record: ResultRecord) -> None:
    backend = get_app().backend
    if backend is not None:
        backend.store_result(record)


def _meta(record: ResultRecord | None) -> dict[str, Any] | None:
    """The Django task data kept in a record (None when the record isn't a Django task's)."""
    if record is None:
        return None
    value = record.result
    if record.state == states.FAILURE and isinstance(value, Mapping):
        message = value.get("exc_message")
        if value.get("exc_type") == DjangoTaskFailed.__qualname__ and isinstance(message, list) and message:
            value = message[-1]
    if isinstance(value, Mapping) and isinstance(value.get("django"), Mapping):
        return dict(value["django"])
    return None


def _date(timestamp: float | None) -> datetime | None:
    return None if timestamp is None else datetime.fromtimestamp(timestamp, UTC)


def _error_of(record: ResultRecord) -> dict[str, str]:
    value = record.result if isinstance(record.result, Mapping) else {}
    path = f"{value.get('exc_module', 'builtins')}.{value.get('exc_type', 'Exception')}"
    return {"exception_class_path": path, "traceback": record.traceback or ""}


def _status(record: ResultRecord | None) -> tuple[TaskResultStatus, Any]:
    if record is None or record.state in (states.PENDING, states.RETRY, "READY"):
        return TaskResultStatus.READY, None
    if record.state == states.SUCCESS:
        value = record.result.get("value") if isinstance(record.result, Mapping) else None
        return TaskResultStatus.SUCCESSFUL, value
    if record.state in (states.FAILURE, states.REVOKED):
        return TaskResultStatus.FAILED, None
    return TaskResultStatus.RUNNING, None


def _task_result(
    task: DjangoTask, result_id: str, status: TaskResultStatus, meta: Mapping[str, Any], alias: str
) -> TaskResult:
    return TaskResult(
        task=task,
        id=result_id,
        status=status,
        enqueued_at=_time(meta.get("enqueued_at")),
        started_at=_time(meta.get("started_at")),
        last_attempted_at=_time(meta.get("started_at")),
        finished_at=_time(meta.get("finished_at")),
        args=list(meta.get("args") or []),
        kwargs=dict(meta.get("kwargs") or {}),
        backend=str(meta.get("backend") or alias),
        errors=[TaskError(**e) for e in meta.get("errors") or []],
        worker_ids=list(meta.get("worker_ids") or []),
    )


# ----------------------------------------------------------------------------- the worker side


def run_django_task(self: Task, meta: dict[str, Any]) -> Any:
    """Run the Django task ``meta`` names (in a worker), recording it as Django expects."""
    from django.tasks import task_backends

    alias = str(meta.get("backend") or "default")
    backend_cls = type(task_backends[alias])
    task = _load(str(meta["path"]))
    worker_id = str(self.request.hostname or "potatoq")
    backend = self.app.backend
    previous = _meta(backend.get_result(self.request.id)) if backend is not None else None
    meta = {
        **meta,
        "worker_ids": [*((previous or {}).get("worker_ids") or []), worker_id],
        "started_at": _iso(_now()),
    }
    self.update_state(state=states.STARTED, meta={"django": meta})
    result = _task_result(task, str(self.request.id), TaskResultStatus.RUNNING, meta, alias)
    task_started.send(sender=backend_cls, task_result=result)
    args = list(meta.get("args") or [])
    if meta.get("takes_context"):
        args.insert(0, TaskContext(task_result=result))
    kwargs = dict(meta.get("kwargs") or {})
    if inspect.iscoroutinefunction(task.func):
        return _finish_async(task.func(*args, **kwargs), task, meta, result, backend_cls)
    try:
        value = task.func(*args, **kwargs)
    except Exception as exc:
        raise _failed(exc, meta, result, backend_cls) from exc
    return _succeeded(value, meta, result, backend_cls)


shared_task(name=RUNNER_NAME, bind=True, track_started=False)(run_django_task)


async def _finish_async(
    coro: Any, task: DjangoTask, meta: dict[str, Any], result: TaskResult, cls: type
) -> Any:
    try:
        value = await coro
    except Exception as exc:
        raise _failed(exc, meta, result, cls) from exc
    return _succeeded(value, meta, result, cls)


def _succeeded(value: Any, meta: dict[str, Any], result: TaskResult, cls: type) -> dict[str, Any]:
    value = normalize_json(value)
    meta["finished_at"] = _iso(_now())
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", _time(meta["finished_at"]))
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=cls, task_result=result)
    return {"django": meta, "value": value}


def _failed(exc: Exception, meta: dict[str, Any], result: TaskResult, cls: type) -> DjangoTaskFailed:
    kind = type(exc)
    error = {
        "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
        "traceback": "".join(traceback.format_exception(exc)),
    }
    meta["errors"] = [*(meta.get("errors") or []), error]
    meta["finished_at"] = _iso(_now())
    object.__setattr__(result, "status", TaskResultStatus.FAILED)
    object.__setattr__(result, "finished_at", _time(meta["finished_at"]))
    result.errors.append(TaskError(**error))
    task_finished.send(sender=cls, task_result=result)
    return DjangoTaskFailed(f"{kind.__name__}: {exc}", {"django": meta})
