"""A worker thread's task-history records, held until they are written in one go (issue 31).

Writing each record on its own costs a statement or script call (and on SQLite a commit's
worth of index pages) per task: most of what history cost a worker's processed/s. So the
SQLite, PostgreSQL and Redis brokers keep the records of the settles a thread made in
this buffer, and write them all *with a settle the thread makes anyway* once the buffer
holds ``HistorySettings.batch`` records or its oldest is ``flush_after`` (a second) old; and
whatever it holds when the thread waits for work, reads history or closes.

What a crash loses: a worker process killed (SIGKILL, OOM, power) loses the records it
held, at most ``batch`` of them and none older than ``flush_after`` plus one task's run;
never a task or its result. ``task_history_batch = 1`` holds only the newest record (it
rides with the next settle).
"""

from __future__ import annotations

import abc
import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar, cast

from .base import Broker
from .history import HistoryRecord, HistorySettings, for_settle
from .records import Delivery, Outcome

__all__ = ["HeldHistory", "HistoryBuffer"]

#: How many forks led to this process (one more in each child): a buffer made before the
#: last fork belongs to the parent.
_forks = [0]


def _forked() -> None:
    _forks[0] += 1


os.register_at_fork(after_in_child=_forked)

#: What a broker holds per record: a HistoryRecord, or its own cheaper form (Redis:
#: history_compact.CompactRecord too).
R = TypeVar("R")


class HistoryBuffer(Generic[R]):
    """One thread's records not yet written, oldest first."""

    __slots__ = ("forks", "records", "since")

    def __init__(self) -> None:
        self.records: list[R] = []
        self.since = 0.0  # time.monotonic() when the oldest record came in
        self.forks = _forks[0]  # the process it belongs to (see _forked)

    def add(self, record: R | None) -> None:
        if record is None:
            return
        if not self.records:
            self.since = time.monotonic()
        self.records.append(record)

    def extend(self, records: Sequence[R]) -> None:
        for record in records:
            self.add(record)

    def take(self, settings: HistorySettings | None = None) -> list[R]:
        """Every record held if they are due by ``settings`` (see :meth:`due`), else none
        (they stay); without ``settings``, every record held."""
        records = self.records
        if settings is not None and not self.due(settings):
            return []
        self.records = []
        return records

    def due(self, settings: HistorySettings) -> bool:
        """Whether the records held are to be written now: ``settings.batch`` of them, or
        the oldest is ``settings.flush_after`` seconds old."""
        records = self.records
        return bool(records) and (
            len(records) >= settings.batch or time.monotonic() - self.since >= settings.flush_after
        )

    def restore(self, records: Sequence[R]) -> None:
        """Put back records whose write failed (or may have): they go with the next try."""
        if records:
            if not self.records:
                self.since = time.monotonic()
            self.records[:0] = records


class HeldHistory(Broker, Generic[R]):
    """Mixin of the brokers that hold records in a :class:`HistoryBuffer` per thread."""

    @abc.abstractmethod
    def _history_flush(self) -> None:
        """Write every record this thread holds now."""

    def _history_buffer(self) -> HistoryBuffer[R]:
        """This thread's buffer (per process and thread: fork-safe).

        A ``threading.local`` and a fork count instead of a :class:`ProcessLocal`, whose
        ``os.getpid()`` system call per lookup cost 1 to 3 µs on this project's VM: a
        settle looks its buffer up twice per task (issue 31)."""
        local: threading.local | None = self.__dict__.get("_history_local")
        if local is None:
            local = self.__dict__.setdefault("_history_local", threading.local())
        buffer: HistoryBuffer[R] | None = getattr(local, "buffer", None)
        if buffer is None or buffer.forks != _forks[0]:
            # a forked child never writes (nor loses) the records its parent held
            buffer = local.buffer = HistoryBuffer()
        return buffer

    def _history_due(self) -> list[R]:
        """The records to write with this settle: all held, once the batch is full or old."""
        return self._history_buffer().take(self.config.history)

    @contextlib.contextmanager
    def _history_riding(self) -> Iterator[list[R]]:
        """The records due to ride along with a settle (:meth:`_history_due`), put back if
        the block raises: the write may not have happened."""
        pending = self._history_due()
        try:
            yield pending
        except BaseException:
            self._history_buffer().restore(pending)
            raise

    def _history_take(self) -> list[R]:
        """Every record held (to write now: idle, a history read, close)."""
        return self._history_buffer().take()

    def _history_record(self, delivery: Delivery, outcome: Outcome, now: float) -> R | None:
        """What this broker holds for a settle: the full record (Redis: a compact one)."""
        return cast("R | None", for_settle(delivery, outcome, now, self.config.history))

    def hold_settled(self, delivery: Delivery, outcome: Outcome) -> None:
        """Hold the record of a settle another broker applied (RabbitMQ, whose history lives
        in its result store), in this broker's own form; written once due."""
        record = self._history_record(delivery, outcome, time.time())
        if record is not None:
            buffer = self._history_buffer()
            buffer.add(record)
            if buffer.due(self.config.history):
                self._history_flush()

    def _as_held(self, records: Sequence[HistoryRecord]) -> Sequence[R]:
        """``records`` in the form this broker holds (the SQL brokers: rows)."""
        # R includes HistoryRecord in every broker that holds records (mixed in below)
        return cast("Sequence[R]", records)

    def hold_history(self, records: Sequence[HistoryRecord]) -> None:
        self._history_buffer().extend(self._as_held(records))
        if self._history_buffer().due(self.config.history):
            self._history_flush()

    def flush_history(self, force: bool = True) -> bool:
        buffer = self._history_buffer()
        if force or buffer.due(self.config.history):
            self._history_flush()
        return bool(buffer.records)
