"""The task page's chain and group links on Redis and Valkey (:meth:`Broker.history_links`).

The history stream is indexed by task name, state and queue only, and an index stream per
parent or group id would put one key per chain step in the registry that every exact trim
walks. So a record that has a parent or a group also goes, in the same round trip as its
append, to a small HASH per parent (``<prefix>history:lp:<id>``) and per group
(``:lg:<id>``): field the task id, value the newest record's finish time, name, state and
links (``history_links.lua``). Each expires ``task_history_max_age`` after its last write,
or sooner once the stream is full: after the time the stream spans, about when its records
are trimmed by ``task_history_max_count`` (so there are never many more links than records).
A task page reads one key per link (``HSCAN``, ``LINKS_SCAN`` fields at most): no stream
is read. Records without a parent or group (most) add nothing; a compact record's link is
made at settle, from the message the worker holds decoded (``history_compact.Link``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis

from ..history import LINKS_SCAN, HistoryRecord, HistorySettings, LinkedTask, link_filter, linked_tasks
from ..history_compact import CompactRecord, Link, link_of

__all__ = ["link_args", "read_links"]

_KIND = {"parent_id": ":lp:", "group_id": ":lg:"}


def _link(record: HistoryRecord) -> Link | None:
    """A full record's link (as :func:`~potatoq.brokers.history_compact.for_settle_compact`
    makes a compact one's), or None when it has neither a parent nor a group."""
    return link_of(
        record.task_id, record.name, record.state, record.parent_id, record.group_id, record.finished_at
    )


def link_args(records: Sequence[HistoryRecord | CompactRecord], settings: HistorySettings) -> list[Any]:
    """``history_links.lua``'s arguments after the prefix for ``records``; [] when none links."""
    args: list[Any] = []
    for held in records:
        link = _link(held) if isinstance(held, HistoryRecord) else held[3]
        if link is not None:
            args += link
    return [int(settings.max_age * 1000), settings.max_count, *args] if args else []


def read_links(
    client: redis.Redis[bytes], history_key: str, parent_id: str | None, group_id: str | None, cutoff: float
) -> list[LinkedTask]:
    """The links of one parent or group (see the module docstring)."""
    field, value = link_filter(parent_id, group_id)
    _, pairs = client.hscan(f"{history_key}{_KIND[field]}{value}", 0, count=LINKS_SCAN)
    found = []
    for task_id, stored in pairs.items():
        finished, _, shown = stored.partition(b" ")
        name, state, parent, group = json.loads(shown)
        found.append(LinkedTask(task_id.decode(), name, state, float(finished), parent, group))
    found.sort(key=lambda t: t.finished_at, reverse=True)
    return linked_tasks(found, cutoff)
