"""Cluster-wide concurrency limits: which limit a call is subject to.

Three sources, the first that names a limit wins:

* ``apply_async(concurrency_limit=N, concurrency_key="acme")`` for one call;
* the ``task_limits`` setting, a per-name table like ``task_annotations``::

      app.conf.task_limits = {"proj.export": {"concurrency": 3}}

* the task's own options, ``@app.task(concurrency_limit=3, concurrency_key=fn)``, where
  ``fn(*args, **kwargs)`` returns the key of a call (a customer id, say) or None;
* the ``task_queue_limits`` setting, ``{"exports": 2}``: calls routed to that queue that
  have no limit of their own share the queue's slots (key ``queue:exports``).

With a key, each key gets its own ``N`` slots (``proj.export[acme]``); without one, the
task name shares them. The result is a ``cl`` header ``[key, N]`` that the broker enforces
in its claim (see :mod:`potatoq.brokers.limits`).

Global rate limits come from the same three places: ``apply_async(global_rate_limit="10/s",
rate_key="acme", rate_burst=5)``, ``task_limits = {"proj.call": {"rate": "100/s", "burst":
10, "rate_key": fn}}`` and ``@app.task(global_rate_limit="100/s", rate_key=fn,
rate_burst=10)``. They give an ``rl`` header ``[key, per_second, burst]``.

Celery's ``rate_limit`` stays what Celery defines it as: a per-worker-node limit, enforced
by the worker supervisor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .brokers.limits import HEADER, RATE_HEADER, validate_limit, validate_rate

__all__ = ["HEADER", "RATE_HEADER", "limit_header", "limit_key", "rate_header"]


def limit_key(task_name: str, key: object) -> str:
    """The broker's name for a limit: the task name, or ``name[key]`` for a per-key one."""
    return task_name if key is None else f"{task_name}[{key}]"


def _setting(settings: Any, name: str) -> Any:
    return settings.get(name) if isinstance(settings, Mapping) else getattr(settings, name, None)


def _configured(settings: Any, task_name: str) -> Mapping[str, Any]:
    table = _setting(settings, "task_limits")
    if not table:
        return {}
    if not isinstance(table, Mapping):
        raise TypeError(f"task_limits must be a dict of task name -> options, got {type(table).__name__}")
    entry = table.get(task_name) or {}
    unknown = set(entry) - {"concurrency", "concurrency_key", "rate", "burst", "rate_key"}
    if unknown:
        raise ValueError(f"task_limits[{task_name!r}] has unknown options {sorted(unknown)}")
    return entry


def _queue_limit(settings: Any, queue: str) -> list[Any] | None:
    table = _setting(settings, "task_queue_limits")
    if not table:
        return None
    if not isinstance(table, Mapping):
        raise TypeError(f"task_queue_limits must be a dict of queue name -> int, got {type(table).__name__}")
    limit = table.get(queue)
    if limit is None:
        return None
    key, checked = validate_limit(f"queue:{queue}", limit)
    return [key, checked]


def _pick(options: Mapping[str, Any], entry: Mapping[str, Any], task: Any, option: str, setting: str) -> Any:
    """A limit option, the first that names it: the call's ``option``, the ``task_limits``
    entry's ``setting``, then the task's attribute of the call option's name."""
    value = options.get(option)
    if value is None:
        value = entry.get(setting)
    if value is None and task is not None:
        value = getattr(task, option, None)
    return value


def _call_key(
    options: Mapping[str, Any],
    entry: Mapping[str, Any],
    task: Any,
    option: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> object:
    """The key of one call: given with the call, else computed by the setting's or the
    task's function of the call's arguments (None: no key)."""
    key: object = options.get(option)
    if key is None:
        compute: Callable[..., object] | None = entry.get(option) or (
            getattr(task, option, None) if task is not None else None
        )
        if compute is not None:
            key = compute(*args, **kwargs)
    return key


def limit_header(
    settings: Any,
    task: Any,
    task_name: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    options: Mapping[str, Any],
    queue: str,
) -> list[Any] | None:
    """The ``cl`` header value for one call, or None when no concurrency limit applies."""
    entry = _configured(settings, task_name)
    limit = _pick(options, entry, task, "concurrency_limit", "concurrency")
    if limit is None:
        return _queue_limit(settings, queue)
    key = _call_key(options, entry, task, "concurrency_key", args, kwargs)
    name, checked = validate_limit(limit_key(task_name, key), limit)
    return [name, checked]


def rate_header(
    settings: Any,
    task: Any,
    task_name: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    options: Mapping[str, Any],
) -> list[Any] | None:
    """The ``rl`` header value ``[key, per_second, burst]`` for one call, or None."""
    entry = _configured(settings, task_name)
    rate = _pick(options, entry, task, "global_rate_limit", "rate")
    if rate is None:
        return None
    burst = _pick(options, entry, task, "rate_burst", "burst")
    key = _call_key(options, entry, task, "rate_key", args, kwargs)
    name, per_second, checked = validate_rate(limit_key(task_name, key), rate, burst)
    return [name, per_second, checked]
