"""The Redis broker's result store and its inspection and admin calls: results (plain and
fenced writes, waiting for one), revocation, the dead letters (list, retry, purge), queue
statistics and purging a queue. Mixed into :class:`~potatoq.brokers.redis.RedisBroker`."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import redis
import redis.exceptions

from potatoq.brokers.base import Broker, DeadLetterRecord, QueueStats, ResultRecord, validate_queue_name
from potatoq.brokers.records import fenced_payload
from potatoq.exceptions import MessageDecodeError
from potatoq.message import Message

from .packing import _ms

if TYPE_CHECKING:
    from .keys import Keys
    from .options import RedisOptions
    from .packing import _Packer


class RedisResults(Broker):
    """Results in ``result:<id>`` strings (mixed into :class:`RedisBroker`)."""

    if TYPE_CHECKING:
        keys: Keys
        options: RedisOptions
        _pack: _Packer

        def _client(self) -> redis.Redis[bytes]: ...
        def _errors(self) -> contextlib.AbstractContextManager[None]: ...
        def _run(self, name: str, args: Sequence[str | bytes | int]) -> Any: ...

    def store_result(self, record: ResultRecord) -> None:
        self._run("result_store", [record.task_id, record.encode(), self._pack.result_ttl])

    def store_result_fenced(self, record: ResultRecord, fence: int, *, keep_ready: bool = False) -> bool:
        payload = fenced_payload(record, fence)
        args: list[str | bytes | int] = [
            record.task_id,
            payload,
            self._pack.result_ttl,
            int(fence),
            int(keep_ready),
        ]
        return bool(self._run("result_store_fenced", args))

    def get_result(self, task_id: str) -> ResultRecord | None:
        with self._errors():
            data = self._client().get(self.keys.result(task_id))
        return None if data is None else ResultRecord.decode(data)

    def wait_for_result(self, task_id: str, timeout: float | None) -> ResultRecord | None:
        """Register as a waiter, read the result, then BLPOP the notification list that
        result writes push to only while someone waits (so unwatched results cost nothing)."""
        from potatoq.states import READY_STATES

        deadline = None if timeout is None else time.monotonic() + timeout
        waiting, notify, result = (
            self.keys.waiting(task_id),
            self.keys.notify(task_id),
            self.keys.result(task_id),
        )
        client = self._client()
        expiry = _ms(self.options.max_block + 60.0)
        with self._errors():
            pipe = client.pipeline(transaction=False)
            pipe.incr(waiting)
            pipe.pexpire(waiting, expiry)
            pipe.get(result)
            data = pipe.execute()[2]
            try:
                while True:
                    record = None if data is None else ResultRecord.decode(data)
                    if record is not None and record.state in READY_STATES:
                        return record
                    block = self.options.max_block
                    if deadline is not None:
                        block = min(block, deadline - time.monotonic())
                        if block < 0.001:
                            return record
                    client.blpop([notify], timeout=block)
                    pipe = client.pipeline(transaction=False)
                    pipe.pexpire(waiting, expiry)
                    pipe.get(result)
                    data = pipe.execute()[1]
            finally:
                with suppress(redis.exceptions.RedisError):  # the counter expires on its own
                    client.decr(waiting)

    def forget_result(self, task_id: str) -> None:
        with self._errors():
            self._client().delete(self.keys.result(task_id))


class RedisAdmin(Broker):
    """Revocation, dead letters, stats and purges (mixed into :class:`RedisBroker`)."""

    if TYPE_CHECKING:
        keys: Keys

        def _client(self) -> redis.Redis[bytes]: ...
        def _errors(self) -> contextlib.AbstractContextManager[None]: ...
        def _run(self, name: str, args: Sequence[str | bytes | int]) -> Any: ...
        def _revoke_recorded(self, task_id: str) -> bool: ...

    def revoke(self, task_id: str) -> bool:
        if self.config.history.enabled:  # task history (issue 31)
            return self._revoke_recorded(task_id)
        return bool(self._run("revoke", [task_id]))

    def list_dead(self, limit: int = 100, offset: int = 0) -> list[DeadLetterRecord]:
        # Entries older than dead_letter_ttl are trimmed at the next dead-lettering; hide
        # them meanwhile (judged by this host's clock: listing never writes).
        oldest = int((time.time() - self.config.dead_letter_ttl) * 1_000_000)
        client = self._client()
        with self._errors():
            entries = client.zrevrangebyscore(
                self.keys.dead, "+inf", oldest, start=offset, num=limit, withscores=True
            )
            if not entries:
                return []
            ids = [task_id for task_id, _ in entries]
            pipe = client.pipeline(transaction=False)
            pipe.hmget(self.keys.dead_payload, ids)
            pipe.hmget(self.keys.dead_info, ids)
            payloads, infos = pipe.execute()
        found = (
            self._dead_record(task_id, score, raw, info)
            for (task_id, score), raw, info in zip(entries, payloads, infos, strict=True)
        )
        return [record for record in found if record is not None]

    def _dead_record(
        self, task_id: bytes, score: float, raw: bytes | None, info: bytes | None
    ) -> DeadLetterRecord | None:
        """One dead letter from its ``dead`` score and its ``dead:payload``/``dead:info``
        fields (None when they were trimmed meanwhile)."""
        if raw is None or info is None:
            return None
        meta = json.loads(info)
        try:
            task: str | None = Message.decode(raw, max_size=self.config.max_message_size).task
        except MessageDecodeError:
            task = None
        return DeadLetterRecord(
            id=task_id.decode(),
            queue=meta["queue"],
            task=task,
            reason=meta["reason"],
            raw=raw,
            died_at=float(meta.get("died") or score / 1000.0) / 1000.0,
            deliveries=int(meta.get("deliveries") or 0),
        )

    def retry_dead(self, ids: Sequence[str] | None = None) -> int:
        args = ["1"] if ids is None else ["0", *ids]
        if ids is not None and not ids:
            return 0
        return int(self._run("dead_retry", args))

    def purge_dead(self) -> int:
        return int(self._run("dead_purge", []))

    def queue_stats(self) -> list[QueueStats]:
        return parse_stats(self._run("queue_stats", []))

    purge_batch = 1_000  # tasks per script call; the server serves others between calls

    def purge(self, queues: Sequence[str]) -> int:
        names = [validate_queue_name(q) for q in queues]
        deleted = 0
        while names:
            batch = int(self._run("purge", [self.purge_batch, *names]))
            deleted += batch
            if batch < self.purge_batch:
                break
        return deleted


def parse_stats(reply: Sequence[Any]) -> list[QueueStats]:
    """``queue_stats.lua``'s reply: the server time, then six values per queue."""
    now_ms = int(reply[0])
    stats = []
    for i in range(1, len(reply), 6):
        name, ready, due, later, active, since = reply[i : i + 6]
        stats.append(
            QueueStats(
                queue=name.decode(),
                waiting=int(ready) + int(due),
                delayed=int(later),
                running=int(active),
                oldest_waiting_age=(max(0.0, (now_ms - int(since)) / 1000.0) if since else None),
            )
        )
    return stats
