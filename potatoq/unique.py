"""Unique tasks: which unique key a call holds (see docs/unique.md).

A call is unique when any of these says so:

* ``apply_async(unique_key="acme")`` (and/or ``unique_for=600``) for one call;
* the task's own option, ``@app.task(unique=True)`` or ``@app.task(unique={...})`` with
  the keys ``key`` (a string, or ``fn(*args, **kwargs)`` returning the key of a call),
  ``for`` (seconds after which the key is released whatever happens) and ``states`` (the
  states in which the task holds its key: ``("waiting", "scheduled", "running")``, the
  default, or ``("waiting", "scheduled")`` to release it when the task starts).

The key is scoped to the task name: ``name[key]`` for a given key, else ``name:`` and the
SHA-256 of the call's arguments as JSON (keyword arguments in name order), so the same
task called with the same arguments is one task. The result is a ``uq`` header that the
broker enforces at enqueue (see :mod:`potatoq.brokers.unique`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import serialization
from .brokers.unique import HEADER, validate_unique

__all__ = ["ALL_STATES", "HEADER", "default_key", "unique_header"]

ALL_STATES = ("waiting", "scheduled", "running")
_OPTIONS = {"key", "for", "states"}


def default_key(task_name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """``name:`` and the SHA-256 of the arguments as JSON, keyword arguments in name order."""
    text = serialization.dumps(
        [list(args), dict(sorted(kwargs.items()))], where=f"arguments of {task_name!r}"
    )
    import hashlib  # loads libcrypto: only for apps that use unique tasks

    return f"{task_name}:{hashlib.sha256(text.encode()).hexdigest()}"


def _holds_while_running(task_name: str, states: object) -> bool:
    chosen = set(states) if isinstance(states, list | tuple | set | frozenset) else None
    if chosen == set(ALL_STATES):
        return True
    if chosen == {"waiting", "scheduled"}:
        return False
    raise ValueError(
        f"unique states of {task_name!r} must be ('waiting', 'scheduled', 'running') or "
        f"('waiting', 'scheduled'), got {states!r}"
    )


def _task_options(task_name: str, task: Any) -> Mapping[str, Any] | None:
    value = getattr(task, "unique", None) if task is not None else None
    if value is None or value is False:
        return None
    if value is True:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"unique of task {task_name!r} must be True, False or a dict, got {value!r:.80}")
    unknown = set(value) - _OPTIONS
    if unknown:
        raise ValueError(
            f"unique of task {task_name!r} has unknown options {sorted(unknown)} (known: key, for, states)"
        )
    return value


def unique_header(
    task: Any,
    task_name: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    options: Mapping[str, Any],
) -> list[Any] | None:
    """The ``uq`` header value ``[key, for, running]`` for one call, or None when it isn't unique."""
    entry = _task_options(task_name, task)
    call_key = options.get("unique_key")
    call_for = options.get("unique_for")
    if entry is None and call_key is None and call_for is None:
        return None
    entry = entry or {}
    key: object = call_key
    if key is None:
        given: str | Callable[..., object] | None = entry.get("key")
        key = given(*args, **kwargs) if callable(given) else given
    name = default_key(task_name, args, kwargs) if key is None else f"{task_name}[{key}]"
    seconds = call_for if call_for is not None else entry.get("for")
    checked, until = validate_unique(name, seconds)
    running = _holds_while_running(task_name, entry.get("states", ALL_STATES))
    return [checked, until, int(running)]
