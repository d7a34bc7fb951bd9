"""Task history on Redis and Valkey: a capped stream per deployment (see
:mod:`potatoq.brokers.history`).

``<prefix>:history`` is a STREAM with one entry per record (field ``r``: the record as
JSON). A settle appends its record right after the settle script succeeded, capped by
``MAXLEN ~ max_count``; about one append in ``trim_every`` also trims exactly to
``max_count`` and drops entries older than ``max_age`` (``XTRIM MINID``: stream ids are
milliseconds). A worker killed between the two
calls loses that one record, never the task's outcome.

Stream ids are the keyset: a page reads ``XREVRANGE`` from just before its cursor. Filters
are applied while reading (a stream has no secondary index), at most ``SCAN_MAX`` entries
per call: when a rare filter finds fewer matches than asked within them, the page comes
back short with a cursor to read on from.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import redis

from .. import history as hist
from ..base import Broker, Delivery, HistoryPage, HistoryQuery, HistoryRecord, Outcome
from ...exceptions import MessageDecodeError
from ...message import Message
from .keys import Keys

SCAN_MAX = 20_000  # stream entries one history() call reads at most
_BATCH = 500


class RedisHistory(Broker):
    """Mixin of :class:`RedisBroker`: writing and reading the history stream."""

    if TYPE_CHECKING:
        keys: Keys

        def _client(self) -> redis.Redis[bytes]: ...
        def _errors(self) -> AbstractContextManager[None]: ...
        def _run(self, name: str, args: Sequence[str | bytes | int]) -> Any: ...

    def _history_settled(self, delivery: Delivery, outcome: Outcome) -> None:
        record = hist.for_settle(delivery, outcome, time.time(), self.config.history)
        if record is not None:
            self.append_history([record])

    def append_history(self, records: Sequence[HistoryRecord]) -> None:
        if not records:
            return
        settings = self.config.history
        with self._errors():
            pipe = self._client().pipeline(transaction=False)
            for record in records:
                pipe.xadd(
                    self.keys.history, {"r": record.encode()}, maxlen=settings.max_count, approximate=True
                )
            if hist.should_trim(settings):
                oldest_ms = int((time.time() - settings.max_age) * 1000)
                # exact now and then: "~" leaves whole stream nodes (100 entries) behind
                pipe.xtrim(self.keys.history, maxlen=settings.max_count, approximate=False)
                pipe.xtrim(self.keys.history, minid=oldest_ms, approximate=False)
            pipe.execute()

    def _revoke_recorded(self, task_id: str) -> bool:
        """``revoke``, leaving a REVOKED record when it removed a waiting task."""
        with self._errors():
            queue, payload = self._client().hmget(self.keys.job(task_id), ["queue", "payload"])
        if not self._run("revoke", [task_id]):
            return False
        name: str | None = None
        if payload is not None:
            try:
                name = Message.decode(payload).task
            except MessageDecodeError:
                pass  # a garbage payload: recorded without a name
        record = hist.for_revoke(
            task_id, name, queue.decode() if queue else "", time.time(), self.config.history
        )
        if record is not None:
            self.append_history([record])
        return True

    def history(self, query: HistoryQuery) -> HistoryPage:
        if query.cursor is not None and not _is_stream_id(query.cursor):
            raise ValueError(f"history cursor {query.cursor!r} is not one this broker issued")
        found: list[HistoryRecord] = []
        last: str | None = None
        scanned = 0
        # Ids are append times, not finish times: a record appended late is hidden once past max_age.
        cutoff = time.time() - self.config.history.max_age
        for entry_id, record in self._newest_first(query.cursor):
            scanned += 1
            last = entry_id
            if record.finished_at >= cutoff and hist.matches(record, query):
                found.append(record)
                if len(found) > query.limit:
                    found.pop()
                    return HistoryPage(found, found[-1].cursor)
            if scanned >= SCAN_MAX:
                return HistoryPage(found, last)
        return HistoryPage(found, None)

    def _newest_first(self, cursor: str | None) -> Iterator[tuple[str, HistoryRecord]]:
        top = "+" if cursor is None else f"({cursor}"
        client = self._client()
        while True:
            with self._errors():
                entries = client.xrevrange(self.keys.history, max=top, min="-", count=_BATCH)
            for raw_id, fields in entries:
                entry_id = raw_id.decode()
                yield entry_id, HistoryRecord.decode(fields[b"r"], cursor=entry_id)
            if len(entries) < _BATCH:
                return
            top = f"({entries[-1][0].decode()}"


def _is_stream_id(text: str) -> bool:
    ms, sep, seq = text.partition("-")
    return bool(sep) and ms.isdigit() and seq.isdigit()
