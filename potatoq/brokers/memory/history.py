"""Task history of ``memory://``: a capped log in the store, newest last (see
:mod:`potatoq.brokers.history`). Its methods run with the store's lock held."""

from __future__ import annotations

import collections
import itertools

from ..history import (
    LINKS_SCAN,
    HistoryPage,
    HistoryQuery,
    HistoryRecord,
    HistorySettings,
    LinkedTask,
    link_filter,
    link_of,
    linked_tasks,
    page_of,
)


class HistoryLog:
    def __init__(self) -> None:
        self.seq = 0
        self.records: collections.deque[tuple[int, HistoryRecord]] = collections.deque()

    def add(self, record: HistoryRecord | None, settings: HistorySettings, now: float) -> None:
        if record is None:
            return
        self.seq += 1
        self.records.append((self.seq, record))
        while len(self.records) > settings.max_count:
            self.records.popleft()
        cutoff = now - settings.max_age
        while self.records and self.records[0][1].finished_at < cutoff:
            self.records.popleft()

    def page(self, query: HistoryQuery) -> HistoryPage:
        try:
            after = int(query.cursor) if query.cursor is not None else None
        except ValueError:
            raise ValueError(f"history cursor {query.cursor!r} is not one this broker issued") from None
        newest_first = (
            _with_cursor(seq, record)
            for seq, record in reversed(self.records)
            if after is None or seq < after
        )
        return page_of(newest_first, query)

    def links(self, parent_id: str | None, group_id: str | None) -> list[LinkedTask]:
        """The process's own list, read newest first (no index to keep: it is in memory),
        ``LINKS_SCAN`` linked records at most, as the other brokers read."""
        field, value = link_filter(parent_id, group_id)
        found = (link_of(r) for _, r in reversed(self.records) if getattr(r, field) == value)
        return linked_tasks(itertools.islice(found, LINKS_SCAN))


def _with_cursor(seq: int, record: HistoryRecord) -> HistoryRecord:
    import dataclasses

    return dataclasses.replace(record, cursor=str(seq))
