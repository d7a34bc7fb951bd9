"""The deliveries a process is running, as the supervisor (or the solo pool) knows them."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from potatoq.brokers.base import Delivery, RunningTask

__all__ = ["Running", "RunningTable", "TableReporter"]

Key = tuple[str, str]  # (task id, fencing token)


@dataclasses.dataclass(slots=True)
class Running:
    key: Key
    pid: int
    soft: float | None
    hard: float | None
    # The delivery, or how to decode it: the supervisor hears of many tasks but needs the
    # delivery itself only for a lost child, a lease extension or a heartbeat.
    source: Delivery | Callable[[], Delivery]
    started: float = dataclasses.field(default_factory=time.monotonic)  # for the hard limit
    started_at: float = dataclasses.field(default_factory=time.time)  # for humans
    settling: bool = False  # ran to the end; its settle is being retried (no hard limit now)

    @classmethod
    def of(
        cls,
        delivery: Delivery,
        pid: int,
        soft: float | None,
        hard: float | None,
        started: float | None = None,
    ) -> Running:
        item = cls((delivery.id, delivery.token), pid, soft, hard, delivery)
        if started is not None:
            item.started = started
        return item

    @property
    def delivery(self) -> Delivery:
        if not isinstance(self.source, Delivery):
            self.source = self.source()
        return self.source

    def hard_deadline(self) -> float | None:
        if self.hard is None or self.settling:
            return None
        return self.started + self.hard

    def as_task(self) -> RunningTask:
        message = self.delivery.message
        return RunningTask(
            pid=self.pid,
            task_id=self.key[0],
            task=message.task if message is not None else "",
            started_at=self.started_at,
        )


class RunningTable:
    """Running deliveries by key; thread-safe (the solo pool reads it from its chores thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[Key, Running] = {}
        self.finished = 0

    def add(self, item: Running) -> None:
        with self._lock:
            self._items[item.key] = item

    def mark_settling(self, key: Key) -> None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                item.settling = True

    def remove(self, key: Key) -> Running | None:
        with self._lock:
            item = self._items.pop(key, None)
            if item is not None:
                self.finished += 1
            return item

    def items(self) -> list[Running]:
        with self._lock:
            return list(self._items.values())

    def pop_all(self) -> list[Running]:
        with self._lock:
            items, self._items = list(self._items.values()), {}
            return items

    def __len__(self) -> int:
        return len(self._items)


class TableReporter:
    """A child's reporter that records into a table in the same process (``-P solo``)."""

    def __init__(self, table: RunningTable, pid: int) -> None:
        self.table = table
        self.pid = pid

    def start(self, delivery: Delivery, soft: float | None, hard: float | None, thread: int = 0) -> None:
        self.table.add(Running.of(delivery, self.pid, soft, hard))

    def settling(self, delivery: Delivery) -> None:
        self.table.mark_settling((delivery.id, delivery.token))

    def end(self, delivery: Delivery) -> None:
        self.table.remove((delivery.id, delivery.token))

    def end_and_start(
        self, done: Delivery, nxt: Delivery, soft: float | None, hard: float | None, thread: int = 0
    ) -> None:
        self.end(done)
        self.start(nxt, soft, hard, thread)

    def retire(self, why: str) -> None:
        pass
