"""A task that hasn't finished yet, as the broker holds it (:meth:`Broker.queued_task`).

The queued message says more than a pending result can: the queue, priority and ETA, how
many deliveries it had, and from its headers the chain or chord it belongs to. Only names
and ids of relatives are shown, never their arguments, so redaction only concerns the
task's own args and kwargs (handled by the caller).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..brokers.base import QueuedTask

__all__ = ["QueuedView", "Relative", "queued_view", "relatives"]


@dataclasses.dataclass(frozen=True)
class Relative:
    """Another task this one is tied to; ``task_id`` is None when it has no id yet."""

    role: str
    task_id: str | None
    name: str | None


@dataclasses.dataclass(frozen=True)
class QueuedView:
    state: str  # "scheduled", "ready" or "running"
    queue: str
    priority: int
    due: float | None
    deliveries: int
    retries: int | None  # None when the payload can't be decoded
    eta: float | None
    expires: float | None
    group_id: str | None
    error: str | None  # why the payload can't be decoded (a worker will dead-letter it)
    relatives: tuple[Relative, ...]
    chord_size: int | None = None  # a chord header member: the header's size


def queued_view(task: QueuedTask) -> QueuedView:
    message = task.message
    headers: Mapping[str, Any] = message.headers if message is not None else {}
    group = headers.get("group_id")
    return QueuedView(
        state=task.state,
        queue=task.queue,
        priority=task.priority,
        due=task.due,
        deliveries=task.deliveries,
        retries=message.retries if message is not None else None,
        eta=message.eta if message is not None else None,
        expires=message.expires if message is not None else None,
        group_id=str(group) if group is not None else None,
        error=task.error,
        relatives=tuple(relatives(task.id, headers)),
        chord_size=_chord_size(headers),
    )


def _chord_size(headers: Mapping[str, Any]) -> int | None:
    chord = headers.get("chord")
    size = chord.get("size") if isinstance(chord, Mapping) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def relatives(task_id: str, headers: Mapping[str, Any]) -> list[Relative]:
    """The chain/chord relatives named in a message's headers (see ``canvas._plain_message``)."""
    found: list[Relative] = []
    parent, root = headers.get("parent_id"), headers.get("root_id")
    if parent:
        found.append(Relative("parent", str(parent), None))
    if root and root not in (task_id, parent):
        found.append(Relative("root", str(root), None))
    for sig in headers.get("chain") or ():
        found.append(_signature("next in chain", sig))
    chord = headers.get("chord")
    if isinstance(chord, Mapping):
        size = chord.get("size")
        body = chord.get("body")
        role = f"chord callback (after {size} parts)" if size else "chord callback"
        if isinstance(body, Mapping):
            found.append(_signature(role, body))
    if headers.get("chord_group"):
        found.append(Relative(f"callback of chord {headers['chord_group']}", None, None))
    for sig in headers.get("link") or ():
        found.append(_signature("on success", sig))
    for sig in headers.get("link_error") or ():
        found.append(_signature("on error", sig))
    return found


def _signature(role: str, sig: Any) -> Relative:
    """A serialized signature: its task name and, once frozen, its task id."""
    if not isinstance(sig, Mapping):
        return Relative(role, None, None)
    options = sig.get("options")
    task_id = options.get("task_id") if isinstance(options, Mapping) else None
    name = sig.get("task")
    return Relative(role, str(task_id) if task_id else None, str(name) if name else None)
