"""The task page's workflow section: a task's chain and its group or chord, linked both ways.

A task knows its own parent, root and group (its history record, its stored result or its
queued message). What ran *after* it, and the other members of its group, are found in
task history by index (:meth:`Broker.history_links`): children are the tasks whose records
name it as their parent; members, those that share its group id. A chord's callback is the
child of the header member whose join completed the chord, so it is looked for among the
children of the members that finished last; a waiting header member names it in its
message (``chord`` header), before any member ran. The state of a parent, root or callback
that history doesn't list here comes from its stored result (a key lookup on every broker).
Only ids, names and states are shown: never arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..brokers.base import Broker, HistoryRecord, LinkedTask
from .data import TaskView

__all__ = ["Link", "Workflow", "workflow"]

#: Members whose children are searched for a chord's callback (the last ones to finish).
CALLBACK_SEARCH = 3


@dataclasses.dataclass(frozen=True)
class Link:
    task_id: str
    name: str | None
    state: str | None  # None: nothing recorded for it yet (waiting, or its result expired)
    finished_at: float | None = None
    group_id: str | None = None  # a parent's or root's group, when its result is stored


@dataclasses.dataclass(frozen=True)
class Workflow:
    parent: Link | None
    root: Link | None
    children: list[Link]  # ran after this task: next chain steps, callbacks
    group_id: str | None
    members: list[Link]  # the group's (or chord header's) members with a record, this one included
    chord_size: int | None  # from a waiting header member's message: the header's size
    callback: Link | None  # the chord's callback
    callback_parent: str | None  # the member whose join completed the chord (None: not run yet)

    @property
    def empty(self) -> bool:
        return not (self.parent or self.children or self.group_id or self.callback)


def _of(task: LinkedTask) -> Link:
    return Link(task.task_id, task.name, task.state, task.finished_at)


def _own_links(
    view: TaskView, deliveries: Sequence[HistoryRecord]
) -> tuple[str | None, str | None, str | None]:
    """This task's parent, root and group ids, from whatever the page has."""
    if deliveries:
        newest = deliveries[0]
        return newest.parent_id, newest.root_id, newest.group_id
    record, queued = view.record, view.queued
    if queued is not None:
        relatives = {r.role: r.task_id for r in queued.relatives}
        return relatives.get("parent"), relatives.get("root"), queued.group_id
    if record is not None:
        return record.parent_id, None, record.group_id
    return None, None, None


def _looked_up(broker: Broker | None, task_id: str, name: str | None = None) -> Link:
    """A relative by its stored result (state and name), if results are kept."""
    record = broker.get_result(task_id) if broker is not None else None
    if record is None:
        return Link(task_id, name, None)
    return Link(task_id, record.name or name, record.state, record.date_done, record.group_id)


def workflow(
    broker: Broker, backend: Broker | None, view: TaskView, deliveries: Sequence[HistoryRecord]
) -> Workflow:
    task_id = view.task_id
    parent_id, root_id, group_id = _own_links(view, deliveries)
    parent = _looked_up(backend, parent_id) if parent_id else None
    ran_after_this = broker.history_links(parent_id=task_id)
    callback: Link | None = None
    callback_parent = None
    parent_group = parent.group_id if parent is not None else None
    is_callback = not group_id and parent_group is not None
    if is_callback:
        # this task ran after a member of a group: the chord's callback (its completing join)
        group_id, callback, callback_parent = parent_group, Link(task_id, view.name, view.state), parent_id
    members = broker.history_links(group_id=group_id) if group_id else []
    ids = {m.task_id for m in members}
    for member in sorted(members, key=lambda m: m.finished_at, reverse=True)[:CALLBACK_SEARCH]:
        if callback is not None:
            break
        ran_after = (
            ran_after_this if member.task_id == task_id else broker.history_links(parent_id=member.task_id)
        )
        after = [c for c in ran_after if c.task_id not in ids]
        if after:
            callback, callback_parent = _of(after[0]), member.task_id
    waiting_callback = next(
        (r for r in (view.queued.relatives if view.queued else ()) if r.role.startswith("chord callback")),
        None,
    )
    if callback is None and waiting_callback is not None and waiting_callback.task_id:
        callback = _looked_up(backend, waiting_callback.task_id, waiting_callback.name)
    shown = [_of(m) for m in members]
    if group_id and not is_callback and task_id not in ids:  # a member yet to finish
        shown.append(Link(task_id, view.name, None))
    return Workflow(
        parent=parent,
        root=_looked_up(backend, root_id) if root_id and root_id not in (task_id, parent_id) else None,
        children=[_of(c) for c in ran_after_this],
        group_id=group_id,
        members=shown,
        chord_size=view.queued.chord_size if view.queued is not None else None,
        callback=callback,
        callback_parent=callback_parent,
    )
