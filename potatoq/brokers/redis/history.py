"""Task history on Redis and Valkey: a capped stream per deployment (see
:mod:`potatoq.brokers.history`).

``<prefix>:history`` is a STREAM with one entry per record, capped at ``max_count`` by
the exact trims below (a record's XADD has no ``MAXLEN``: its check cost about a third
of the XADD, issue 31). A settle's record is usually *compact* (:mod:`~potatoq.brokers.history_compact`):
the task's payload as delivered (field ``p``) and what only the settle knows (field ``m``:
name, state, queue, times, deliveries, worker, pid and the exception or result preview,
joined by NULs), and the full record, argument preview and redaction included, is built
when read. Others (revokes, crash recovery, a payload over ``RAW_MAX`` bytes or with a
keyword argument to redact) are stored whole (field ``r``: the record as JSON). About one
record in ``trim_every`` (200) its append also trims exactly to ``max_count``, with the
indexes, and drops entries older than ``max_age`` (``XTRIM MINID``: stream ids are
milliseconds): the stream holds a few hundred records more than ``max_count`` between
two trims.

Every state change is one round trip (one EVALSHA), and whether a settle applied is known
only from its reply. So a settle's record goes to this thread's
:class:`~potatoq.brokers.history_buffer.HistoryBuffer`, and the buffer's records are
appended by one script call *pipelined in front of a script call the thread makes anyway*
to settle or revoke (the same single send) once it holds ``task_history_batch`` records or
its oldest is a second old; or when the thread next waits for work, reads history or
closes. A worker killed meanwhile loses the records it held (see history_buffer), never a
task or its result.

Every append is one ``history_append.lua`` call, which also adds each entry's id to its
filter indexes: ``<prefix>:history:n:<name>``, ``:q:<queue>`` and, but for SUCCESS,
``:s:<state>``, STREAMs whose entry ids *are* the main stream's ids (one empty field),
trimmed on each exact trim to the stream's oldest id (empty ones deleted;
``<prefix>:history:indexes`` is the SET of index keys); a record appended ``LATE`` or more
after it finished also goes to ``:late``. SUCCESS has no index: most records are, so it
would be a near copy of the stream that costs the server an XADD per record (issue 31);
an index ``:s:SUCCESS`` that an older version wrote is no longer read, and the exact
trim empties and deletes it.

It also adds the record's id to its task's field in the *task index*: HASH buckets
``<prefix>:history:tasks:<first id>`` (task id -> its ids joined by ``,``) listed in the
ZSET ``<prefix>:history:tasks``, with one HMGET and one HSET per call; a bucket is dropped
by the exact trim once all it points at is trimmed (history_append.lua says why buckets,
not a key per task).

The charts' rollups (:mod:`~potatoq.brokers.history_rollup`) are not written by the
appends: ``history_rollup_build.lua`` builds them from the stream in bulk, after the
cursor ``<prefix>:history:rolled`` (the last entry rolled up; set by the first append
when missing, at the newest entry then, so an older version's records, whose rollups it
wrote, are not counted again), exactly once whoever calls it: each recovery round
(:meth:`RedisHistory.roll_up_history`, riding the reap's round trip) and each chart read,
which catches up first (docs/history.md).

A batch with records that have a parent or a group also sends ``history_links.lua`` in the
same round trip (the task page's links: :mod:`~potatoq.brokers.redis.history_links`).

Stream ids are the keyset: a page reads ``XREVRANGE`` from just before its cursor, in
batches (``history_read.lua``). A query by task id reads the task's ids from every bucket
(records written before the task index existed, by an older version, are then looked for
in the stream below the oldest bucket, as before). A query by state, name or queue walks
that index (index ids, then each record by id): a state other than SUCCESS first (rare in
a working deployment), then name, queue; exception text (after queue) walks the indexes
of every state but SUCCESS, merged newest first by id in ``history_read.lua`` (the records
a settle leaves with an exception; a success has none, and a SUCCESS record handed to
``append_history`` with one isn't found by such a search); a query by SUCCESS alone reads
the stream. The other filters are checked while reading: the script sends back only the entries that
hold each other filter's field (a full record's JSON holds it as written, a compact
entry's meta or payload holds its value) and, for exception text it can match so, the
text; :func:`hist.matches` checks those exactly. A time range bounds the ids read (ids
are append times: since less ``CLOCK_SKEW``, until plus ``APPEND_LAG``), and the script
leaves the records that finished outside it. With an end, only the ids up to ``LATE``
past it are read from the stream (or its index); above them, the late index (``:late``:
records appended ``LATE`` or more after they finished) is read instead. At most
``SCAN_MAX`` entries are read per call: when a filter without an index (a second filter,
SUCCESS) finds fewer matches than asked within them, the page comes back
short with a cursor to read on from.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import redis
from redis.connection import AbstractConnection as Connection

from ... import states
from ...exceptions import MessageDecodeError
from ...message import Message
from .. import history as hist
from ..base import (
    Broker,
    Delivery,
    HistoryBucket,
    HistoryPage,
    HistoryQuery,
    HistoryRecord,
    LinkedTask,
    Outcome,
    ProcessLocal,
)
from ..history_buffer import HeldHistory
from ..history_compact import CompactRecord, for_settle_compact, preview_of, record_of
from ..history_rollup import buckets_from_rollups, decode_fields, window_minutes
from .history_links import link_args, read_links
from .keys import Keys
from .packing import _pack
from .scripts import SCRIPTS

log = logging.getLogger("potatoq.brokers.redis")

SCAN_MAX = 20_000  # stream (or index) entries one history() call reads at most
CLOCK_SKEW = 60.0  # seconds a worker's clock (finished_at) may run ahead of the server's (ids)
APPEND_LAG = 3600.0  # seconds a record may wait in its thread's buffer (one task's run) and still
#                      be found by a time range that ends before it was appended
LATE = 10.0  # seconds after its finish past which a record's id is also put in the late
#              index (history_append.lua's LATE_MS)
_BATCH = 500
ROLLUP_BATCH = 2_000  # stream entries one history_rollup_build call rolls up at most
ROLLUP_CATCH_UP = 50  # calls a chart read makes at most to catch up (100,000 entries)
ROLLUP_HOUSEKEEPING = 5  # calls a recovery round makes at most

#: What a thread holds to append: full records, or compact ones (history_compact).
Held = HistoryRecord | CompactRecord


class RedisHistory(HeldHistory[Held], Broker):
    """Mixin of :class:`RedisBroker`: writing and reading the history stream."""

    if TYPE_CHECKING:
        keys: Keys

        _script_conns: ProcessLocal[Connection]

        def _client(self) -> redis.Redis[bytes]: ...
        def _errors(self) -> AbstractContextManager[None]: ...
        def _run(self, name: str, args: Sequence[str | bytes | int]) -> Any: ...

    def _history_settled(self, delivery: Delivery, outcome: Outcome) -> None:
        """Hold the record of a settle that applied (sent with a later round trip): a
        compact one when it can be (history_compact)."""
        self._history_buffer().add(for_settle_compact(delivery, outcome, time.time(), self.config.history))

    def _history_record(self, delivery: Delivery, outcome: Outcome, now: float) -> Held | None:
        return for_settle_compact(delivery, outcome, now, self.config.history)

    def _history_commands(self, records: Sequence[Held]) -> list[tuple[Any, ...]]:
        """One ``history_append`` call for ``records`` (none for no records)."""
        if not records:
            return []
        settings = self.config.history
        trim = hist.should_trim(settings, len(records))
        oldest_ms = int((time.time() - settings.max_age) * 1000) if trim else 0
        args: list[str | bytes | int] = [settings.max_count, "1" if trim else "0", oldest_ms]
        for r in records:
            if isinstance(r, HistoryRecord):
                args += ("r", r.name or "", r.state, r.queue, r.encode())
            else:  # a CompactRecord: already in the script's order (its link aside)
                args += r[:3]
        commands = [_evalsha(self, "history_append", args)]
        links = link_args(records, settings)  # the task page's links (history_links.py)
        if links:
            commands.append(_evalsha(self, "history_links", links))
        return commands

    def _pipelined(self, pending: Sequence[Held], *tail: tuple[Any, ...], soft: int = 0) -> list[Any]:
        """Send ``pending`` records, then the ``tail`` commands, in one round trip on the
        script connection; the tail's replies. A tail EVALSHA refused with NOSCRIPT is
        loaded and run again. An error reply raises, but for the last ``soft`` commands'
        (returned: they must not hide what the others did)."""
        commands = [*self._history_commands(pending), *tail]
        replies: list[Any] = []
        try:
            with self._errors():
                conn = self._script_conns.get()
                try:
                    # hiredis' packer when installed: redis-py's encodes every argument in Python
                    packed: Any = (
                        [b"".join(_pack(c) for c in commands)]
                        if _pack is not None
                        else conn.pack_commands(commands)  # bytes chunks; typed as str
                    )
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
            self._history_buffer().restore(pending)  # maybe not written: kept for the next try
            raise
        cut = len(replies) - len(tail)
        for i, reply in enumerate(replies[:cut]):
            if isinstance(reply, redis.exceptions.NoScriptError):  # after a restart or SCRIPT FLUSH
                try:
                    replies[i] = self._run(_script_name(commands[i][1]), list(commands[i][4:]))
                except redis.exceptions.ResponseError as exc:
                    replies[i] = exc
        failed = [r for r in replies[:cut] if isinstance(r, Exception)]
        if failed:  # the commands after them ran (a settle applied): report, don't raise
            log.warning("task history: %d record write(s) failed: %s", len(failed), failed[0])
        out = replies[cut:]
        for i, reply in enumerate(out):
            if isinstance(reply, redis.exceptions.NoScriptError):
                command = tail[i]
                out[i] = self._run(_script_name(command[1]), list(command[4:]))
            elif isinstance(reply, Exception) and i < len(out) - soft:
                raise reply
        return out

    def _run_after_history(self, name: str, args: Sequence[str | bytes | int]) -> Any:
        """Script ``name``, preceded in the same round trip by this thread's buffered records."""
        pending = self._history_due()
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
        self._history_buffer().add(record)
        return True

    def _history_reaped(self, dead: int, keys: Keys | None = None) -> None:
        """Record the ``dead`` tasks the reap script just dead-lettered: the newest dead
        letters (read after the script, only when it reports some: crashes are rare).
        ``keys``: where the reap's dead set is (a queue's slot on a cluster)."""
        if dead <= 0 or not self.config.history.enabled:
            return
        keys = keys or self.keys
        with self._errors():
            client = self._client()
            ids = client.zrevrange(keys.dead, 0, dead - 1)
            if not ids:
                return
            infos = client.hmget(keys.dead_info, ids)
            payloads = client.hmget(keys.dead_payload, ids)
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
            self._history_buffer().add(record)

    def history(self, query: HistoryQuery) -> HistoryPage:
        self._history_flush()  # this thread's own settles are visible to it at once
        if query.cursor is not None and not _is_stream_id(query.cursor):
            raise ValueError(f"history cursor {query.cursor!r} is not one this broker issued")
        found: list[HistoryRecord] = []
        # Ids are append times, not finish times: a record appended late is hidden once past max_age.
        cutoff = time.time() - self.config.history.max_age
        low = max(cutoff, query.since or cutoff)
        high = math.inf if query.until is None else query.until
        legs = _legs(query, cutoff)  # (index, top, bottom): ranges read one after the other
        settings = self.config.history
        scanned = 0
        count = query.limit + 1  # a first page often needs no more; then batches
        while legs:
            index, top, bottom = legs.pop(0)
            lower, exact, raw = _needles(query, index)
            while True:
                count = max(1, min(count, SCAN_MAX - scanned))  # a leg reads at least one batch
                read, last, pairs = self._read_batch(
                    index, top, bottom, count, (low, high), lower, exact, raw
                )
                scanned += read
                for raw_id, fields in pairs:
                    entry_id = raw_id.decode()
                    payload = fields.get(b"p") if b"r" not in fields else None
                    if payload is None:
                        data = fields[b"r"]
                        if not low <= _finished_at(data) < high:  # a time range: no JSON decoded
                            continue
                        record = HistoryRecord.decode(data, cursor=entry_id)
                    else:
                        record = record_of(fields, settings, entry_id, preview=False)
                        if not low <= record.finished_at < high:
                            continue
                    if hist.matches(record, query):
                        if payload is not None:  # compact: its preview is built for the records shown only
                            record.args_preview = preview_of(payload, settings)
                        found.append(record)
                        if len(found) > query.limit:
                            found.pop()
                            return HistoryPage(found, found[-1].cursor)
                if read < count or last is None:
                    break  # the leg's range holds no more entries
                top, count = f"({last}", _BATCH
                if scanned >= SCAN_MAX:
                    return HistoryPage(found, last)
            if index is not None and index[:3] == ":t:":
                older = self._unindexed_top(top)
                if older is not None:  # records appended before the task index (an upgrade)
                    legs.append((None, older, bottom))
        return HistoryPage(found, None)

    def _unindexed_top(self, top: str) -> str | None:
        """Where the records not in the task index (appended before it, by an older
        version) end, as an XREVRANGE bound at or below ``top``; None: there are none."""
        with self._errors():
            client = self._client()
            oldest = client.xrange(self.keys.history, count=1)
            bucket = client.zrange(f"{self.keys.history}:tasks", 0, 0)
        if not oldest:
            return None
        if not bucket:
            return top  # no index at all: every record
        indexed = bucket[0].decode().rpartition(":")[2]  # the bucket's first id
        if _stream_id(oldest[0][0].decode()) >= _stream_id(indexed):
            return None
        return top if _bound_key(top) <= _stream_id(indexed) else f"({indexed}"

    def roll_up_history(self, calls: int = ROLLUP_HOUSEKEEPING) -> int:
        """Add the stream's records not yet rolled up to the charts' rollups, at most
        ``calls`` calls of ``history_rollup_build.lua`` (``ROLLUP_BATCH`` entries each);
        how many entries were rolled. Run by each recovery round (worker supervisors) and
        before a chart is read: never on a settle (issue 31)."""
        if not self.config.history.enabled:
            return 0
        total = 0
        for _ in range(calls):
            rolled, more = self._run("history_rollup_build", list(self._rollup_command()[4:]))
            total += int(rolled)
            if not more:
                break
        return total

    def _rollup_command(self) -> tuple[Any, ...]:
        """One ``history_rollup_build`` call (an EVALSHA, to pipeline)."""
        max_age = self.config.history.max_age
        # the TTL: max_age and a little; records finished before max_age are left out
        args: list[str | int] = [ROLLUP_BATCH, int(max_age) + 120, repr(time.time() - max_age)]
        return _evalsha(self, "history_rollup_build", args)

    def history_buckets(
        self, start: float, step: float, buckets: int, name: str | None = None
    ) -> dict[int, HistoryBucket] | None:
        """From the per-minute rollup hashes ``history_rollup_build.lua`` builds (caught
        up first, so this thread's own settles show): one script call reads the window's
        minutes of ``name`` (every task for None)."""
        self._history_flush()
        self.roll_up_history(ROLLUP_CATCH_UP)
        span, lo, hi = window_minutes(start, step, buckets)
        reply = self._run("history_rollups", [name or "", span, lo, hi])
        minutes = ((int(reply[i]), decode_fields(reply[i + 1])) for i in range(0, len(reply), 2))
        return buckets_from_rollups(minutes, start, step, buckets)

    def history_links(self, *, parent_id: str | None = None, group_id: str | None = None) -> list[LinkedTask]:
        self._history_flush()
        with self._errors():
            cutoff = time.time() - self.config.history.max_age
            return read_links(self._client(), self.keys.history, parent_id, group_id, cutoff)

    def _read_batch(
        self,
        index: str | None,
        top: str,
        bottom: str,
        count: int,
        span: tuple[float, float],
        lower: Sequence[str],
        exact: Sequence[str],
        raw: Sequence[str],
    ) -> tuple[int, str | None, list[tuple[bytes, dict[bytes, bytes]]]]:
        """Up to ``count`` entries from ``top`` down to ``bottom`` (XREVRANGE bounds), of the
        whole stream or of the index (key suffix) ``index``, read by ``history_read.lua``:
        (entries read, the last one's id, (id, fields) of those holding the needles and
        finished within ``span``: since, before)."""
        since, before = span
        args: list[str | int] = [
            index or "",
            top,
            bottom,
            count,
            len(lower),
            len(exact),
            # widened by a millisecond: the script's pre-filter must not drop a record
            # that the exact check (in Python) keeps
            repr(since - 0.001),
            "" if before == math.inf else repr(before + 0.001),
            *lower,
            *exact,
            *raw,
        ]
        reply = self._run("history_read", args)
        read, last = int(reply[0]), reply[1].decode() if reply[1] else None
        pairs = [
            (reply[i], dict(zip(reply[i + 1][::2], reply[i + 1][1::2], strict=True)))
            for i in range(2, len(reply), 2)
        ]
        return read, last, pairs


def _finished_at(data: bytes) -> float:
    """A record's ``finished_at``, read from its JSON without decoding the rest."""
    start = data.find(b'"finished_at":') + 14
    end = data.find(b",", start)
    try:
        return float(data[start : end if end > 0 else None].rstrip(b"}"))
    except ValueError:
        return float(HistoryRecord.decode(data).finished_at)


def _needles(query: HistoryQuery, index: str | None) -> tuple[list[str], list[str], list[str]]:
    """``history_read.lua``'s needles for ``query``: (lower-case, exact, raw) texts a matching
    entry surely holds (so the script sends back only likely matches).

    An equality filter is its field as the record's encoder writes it (exact, for a full
    record's JSON) and its value as is (raw, for a compact entry's meta and payload). Of
    exception text,
    each word (a match's words lie whole in the type or the message) that JSON writes as
    is (printable ASCII, no quote or backslash), looked for in the lower-cased JSON; the
    records that hold them all go back, and :func:`hist.matches` decides."""
    filters = [
        (field, value)
        for field in ("task_id", "name", "state", "queue")
        if (value := getattr(query, field)) is not None and index != _INDEX_PREFIX[field] + value
    ]
    exact = [f'"{field}":{json.dumps(value)}' for field, value in filters]
    raw = [value for _, value in filters]
    words = (query.text or "").lower().split(" ")
    lower = [w for w in words if w and w.isascii() and w.isprintable() and '"' not in w and "\\" not in w]
    return lower, exact, raw


_INDEX_PREFIX = {"task_id": ":t:", "name": ":n:", "queue": ":q:", "state": ":s:"}
#: The union (history_read.lua's ``:u:``) of the indexes of every state but SUCCESS: the
#: records that can carry exception text (a success records none: history._outcome_fields).
#: Not SUCCESS's index, which is the bulk of the records, and which the write side may stop
#: keeping.
_EXCEPTIONS = ":u:" + ",".join(sorted(s for s in hist.HISTORY_STATES if s != states.SUCCESS))


def _index_of(query: HistoryQuery) -> str | None:
    """The index (key suffix) a query reads: by task id (the task index's buckets, see
    history_append.lua), else a state but SUCCESS (rare in a working deployment), else
    name, else queue, else exception text (``_EXCEPTIONS``: the indexes of the states a
    record with an exception has, merged); None: the stream. SUCCESS has no index (most records are, so it
    would be a near copy of the stream, written at a cost per record): a query by it
    alone reads the stream and keeps the SUCCESS records. An index ``:s:SUCCESS``
    written by an older version is left unread, and goes with the exact trim."""
    if query.task_id is not None:
        return f":t:{query.task_id}"
    if query.state is not None and query.state != states.SUCCESS:
        return f":s:{query.state}"
    if query.name is not None:
        return f":n:{query.name}"
    if query.queue is not None:
        return f":q:{query.queue}"
    if hist.text_window(query):
        return _EXCEPTIONS
    return None


def _legs(query: HistoryQuery, cutoff: float) -> list[tuple[str | None, str, str]]:
    """The ranges a query reads, newest first: (index key suffix or None, XREVRANGE upper
    and lower bounds). One, but for a time range with an end (and no task id): ids up to
    ``LATE`` past its end from its index (or the stream), and above that only the late
    index (history_append.lua), instead of every id up to ``APPEND_LAG`` past it."""
    top, bottom = _id_bounds(query, cutoff)
    index = _index_of(query)
    if query.until is None or (index is not None and index[:3] == ":t:"):
        return [(index, top, bottom)]
    edge = int((query.until + LATE + 1.0) * 1000)  # a second more: ms rounding and floats
    legs: list[tuple[str | None, str, str]] = []
    if _bound_key(top) > (edge + 1, 0):  # ids at or above (edge + 1)-0 lie under top
        legs.append((":late", top, str(max(edge + 1, int(bottom)))))
    if edge >= int(bottom):
        legs.append((index, top if _bound_key(top) <= (edge + 1, 0) else str(edge), bottom))
    return legs


def _id_bounds(query: HistoryQuery, cutoff: float) -> tuple[str, str]:
    """The XREVRANGE bounds (highest, lowest) that hold every record the query can match:
    below its cursor; appended at or after its ``since`` (and ``cutoff``), less ``CLOCK_SKEW``;
    appended before ``until`` plus ``APPEND_LAG``."""
    low_ms = int((max(cutoff, query.since or 0.0) - CLOCK_SKEW) * 1000)
    bottom = str(max(low_ms, 0))
    top = "+" if query.cursor is None else f"({query.cursor}"
    if query.until is not None:
        high_ms = int((query.until + APPEND_LAG) * 1000)
        if query.cursor is None or high_ms < int(query.cursor.partition("-")[0]):
            top = str(high_ms)
    return top, bottom


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


def _stream_id(text: str) -> tuple[float, float]:
    """A stream id ``<ms>-<seq>`` as numbers, to compare."""
    ms, _, seq = text.partition("-")
    return float(ms), float(seq)


def _bound_key(top: str) -> tuple[float, float]:
    """The ids below an XREVRANGE upper bound are those under this (ms, seq)."""
    if top == "+":
        return math.inf, 0.0
    if top.startswith("("):
        return _stream_id(top[1:])
    ms, _, seq = top.partition("-")
    return (float(ms), float(seq) + 1) if seq else (float(ms) + 1, 0.0)


def _is_stream_id(text: str) -> bool:
    ms, sep, seq = text.partition("-")
    return bool(sep) and ms.isdigit() and seq.isdigit()
