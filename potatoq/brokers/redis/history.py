"""Task history on Redis and Valkey: a capped stream per deployment (see
:mod:`potatoq.brokers.history`).

``<prefix>:history`` is a STREAM with one entry per record (field ``r``: the record as
JSON), capped by ``MAXLEN ~ max_count``; about one append in ``trim_every`` also trims
exactly to ``max_count`` and drops entries older than ``max_age`` (``XTRIM MINID``: stream
ids are milliseconds).

Every state change is one round trip (one EVALSHA), and whether a settle applied is known
only from its reply. So a settle's record is kept in this thread's buffer and its XADD is
pipelined *in front of the thread's next script call* that settles or revokes (the same
single send), or sent when the thread next waits for work, reads history or closes. A busy
worker's records land one task late; a worker killed meanwhile loses the record it
buffered, never a task or its result.

Stream ids are the keyset: a page reads ``XREVRANGE`` from just before its cursor. Filters
are applied while reading (a stream has no secondary index), at most ``SCAN_MAX`` entries
per call: when a rare filter finds fewer matches than asked within them, the page comes
back short with a cursor to read on from.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import redis
from redis.connection import AbstractConnection as Connection

from ...exceptions import MessageDecodeError
from ...message import Message
from .. import history as hist
from ..base import Broker, Delivery, HistoryPage, HistoryQuery, HistoryRecord, Outcome, ProcessLocal
from .keys import Keys
from .scripts import SCRIPTS

log = logging.getLogger("potatoq.brokers.redis")

SCAN_MAX = 20_000  # stream entries one history() call reads at most
_BATCH = 500


class RedisHistory(Broker):
    """Mixin of :class:`RedisBroker`: writing and reading the history stream."""

    if TYPE_CHECKING:
        keys: Keys

        _script_conns: ProcessLocal[Connection]

        def _client(self) -> redis.Redis[bytes]: ...
        def _errors(self) -> AbstractContextManager[None]: ...
        def _run(self, name: str, args: Sequence[str | bytes | int]) -> Any: ...

    def _history_buffer(self) -> list[HistoryRecord]:
        """This thread's records not yet sent (per process and thread: fork-safe)."""
        local: ProcessLocal[list[HistoryRecord]] | None = self.__dict__.get("_history_local")
        if local is None:
            local = self.__dict__.setdefault("_history_local", ProcessLocal(list))
        return local.get()

    def _history_settled(self, delivery: Delivery, outcome: Outcome) -> None:
        """Buffer the record of a settle that applied (sent with the next round trip)."""
        record = hist.for_settle(delivery, outcome, time.time(), self.config.history)
        if record is not None:
            self._history_buffer().append(record)

    def _history_take(self) -> list[HistoryRecord]:
        buffer = self._history_buffer()
        taken = buffer[:]
        buffer.clear()
        return taken

    def _history_commands(self, records: Sequence[HistoryRecord]) -> list[tuple[Any, ...]]:
        settings = self.config.history
        key = self.keys.history
        commands: list[tuple[Any, ...]] = [
            ("XADD", key, "MAXLEN", "~", settings.max_count, "*", "r", r.encode()) for r in records
        ]
        if records and hist.should_trim(settings):
            # exact now and then: "~" leaves whole stream nodes (100 entries) behind
            oldest_ms = int((time.time() - settings.max_age) * 1000)
            commands += [("XTRIM", key, "MAXLEN", settings.max_count), ("XTRIM", key, "MINID", oldest_ms)]
        return commands

    def _pipelined(self, pending: Sequence[HistoryRecord], *tail: tuple[Any, ...]) -> list[Any]:
        """Send ``pending`` records, then the ``tail`` commands, in one round trip on the
        script connection; the tail's replies. A tail EVALSHA refused with NOSCRIPT is
        loaded and run again."""
        commands = [*self._history_commands(pending), *tail]
        replies: list[Any] = []
        try:
            with self._errors():
                conn = self._script_conns.get()
                try:
                    packed: Any = conn.pack_commands(commands)  # bytes chunks; typed as str
                    conn.send_packed_command(packed)
                    for _ in commands:  # read every reply, errors too, to stay in step
                        try:
                            replies.append(conn.read_response())
                        except redis.exceptions.ResponseError as exc:
                            replies.append(exc)
                except BaseException:
                    conn.disconnect()  # replies may be half read
                    raise
        except BaseException:
            self._history_buffer()[:0] = pending  # maybe not written: keep them for the next try
            raise
        cut = len(replies) - len(tail)
        failed = [r for r in replies[:cut] if isinstance(r, Exception)]
        if failed:  # the commands after them ran (a settle applied): report, don't raise
            log.warning("task history: %d record write(s) failed: %s", len(failed), failed[0])
        out = replies[cut:]
        for i, reply in enumerate(out):
            if isinstance(reply, redis.exceptions.NoScriptError):
                command = tail[i]
                out[i] = self._run(_script_name(command[1]), list(command[4:]))
            elif isinstance(reply, Exception):
                raise reply
        return out

    def _run_after_history(self, name: str, args: Sequence[str | bytes | int]) -> Any:
        """Script ``name``, preceded in the same round trip by this thread's buffered records."""
        pending = self._history_take()
        if not pending:
            return self._run(name, args)
        return self._pipelined(pending, _evalsha(self, name, args))[0]

    def _history_flush(self) -> None:
        pending = self._history_take()
        if pending:
            self._pipelined(pending)

    def append_history(self, records: Sequence[HistoryRecord]) -> None:
        self._history_buffer().extend(records)
        self._history_flush()

    def _revoke_recorded(self, task_id: str) -> bool:
        """``revoke`` in one round trip (buffered records, the job's name and queue, the
        script), buffering a REVOKED record when it removed a waiting task."""
        fields = ("HMGET", self.keys.job(task_id), "queue", "payload")
        (queue, payload), removed = self._pipelined(
            self._history_take(), fields, _evalsha(self, "revoke", [task_id])
        )
        if not removed:
            return False
        name = _task_name(payload)
        record = hist.for_revoke(
            task_id, name, queue.decode() if queue else "", time.time(), self.config.history
        )
        if record is not None:
            self._history_buffer().append(record)
        return True

    def _history_reaped(self, dead: int) -> None:
        """Record the ``dead`` tasks the reap script just dead-lettered: the newest dead
        letters (read after the script, only when it reports some: crashes are rare)."""
        if dead <= 0 or not self.config.history.enabled:
            return
        with self._errors():
            client = self._client()
            ids = client.zrevrange(self.keys.dead, 0, dead - 1)
            if not ids:
                return
            infos = client.hmget(self.keys.dead_info, ids)
            payloads = client.hmget(self.keys.dead_payload, ids)
        now = time.time()
        for raw_id, info, payload in zip(ids, infos, payloads, strict=True):
            details = json.loads(info) if info else {}
            record = hist.for_lost(
                raw_id.decode(),
                _task_name(payload),
                str(details.get("queue") or ""),
                int(details.get("deliveries") or 0),
                str(details.get("reason") or ""),
                now,
                self.config.history,
            )
            if record is not None:
                self._history_buffer().append(record)

    def history(self, query: HistoryQuery) -> HistoryPage:
        self._history_flush()  # this thread's own settles are visible to it at once
        if query.cursor is not None and not _is_stream_id(query.cursor):
            raise ValueError(f"history cursor {query.cursor!r} is not one this broker issued")
        found: list[HistoryRecord] = []
        last: str | None = None
        # Ids are append times, not finish times: a record appended late is hidden once past max_age.
        cutoff = time.time() - self.config.history.max_age
        for scanned, (entry_id, record) in enumerate(self._newest_first(query.cursor), 1):
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


def _evalsha(broker: RedisHistory, name: str, args: Sequence[str | bytes | int]) -> tuple[Any, ...]:
    return ("EVALSHA", SCRIPTS[name].sha, 0, broker.keys.prefix, *args)


def _script_name(sha: str) -> str:
    return next(name for name, script in SCRIPTS.items() if script.sha == sha)


def _task_name(payload: bytes | None) -> str | None:
    """The task name in a job's payload; None for a missing or garbage payload."""
    if payload is None:
        return None
    try:
        return Message.decode(payload).task
    except MessageDecodeError:
        return None


def _is_stream_id(text: str) -> bool:
    ms, sep, seq = text.partition("-")
    return bool(sep) and ms.isdigit() and seq.isdigit()
