"""Concurrency and rate limits on the Redis Cluster broker (cluster.py).

A limit key is shared by every queue its tasks go to, and a cluster script sees one hash
slot: so the key's state lives in a slot of its own, ``{<prefix>:k:<key>}``. The claim
stays one single-slot script in the queue's slot, which on a cluster reads no limit header
(``lua/_cluster.lua``); right after it:

* **concurrency**: the RabbitMQ broker's ``slot_take`` (``potatoq/brokers/rabbitmq/lua``,
  loaded from its file unchanged: it takes the same prefix argument as every Redis script)
  in the key's slot. A slot is a holder (the delivery's fencing token) in the key's sorted
  set, scored by a lease deadline of ``worker_dead_after``, renewed by
  :meth:`RedisClusterBroker.extend` together with the task's own lease: a process that
  dies stops renewing both, so the slot runs out when the reaper may take the task back,
  and the next take drops it. The settle gives it back (``slot_release``) and makes the
  task of its queue that waited longest on the key due at once.
* **rate**: ``cluster_rate_take.lua`` in the key's slot: GCRA taken by the claim that runs
  the task, as in a single server's claim script. Not the RabbitMQ broker's ``rate_take``,
  which reserves the next token for a waiting task: a worker that falls behind then uses
  several reserved tokens late, at once, and the rate ledger saw 38 starts in a second at
  20/s with a burst of 5. Its keys are ``rate_take``'s, so ``rate_set``/``rate_usage``
  are reused unchanged.

A task that gets no slot or no token goes back to its queue's delayed set
(``cluster_limit_defer.lua``): its delivery count goes back down, it holds no worker, and
other tasks of the queue are claimed past it. A slot's waiter is due again after
:data:`SLOT_WAIT` times its number of tries (10 at most), or at once when a slot of its key
is given back in its queue (the one that waited longest) or the limit is set at run time.
A rate's waiter is due when its token is expected, one token after the last task told to
wait (:data:`RATE_RECHECK` ahead at most), or at once when the rate is set at run time; it
keeps its place in line when it comes back a little early (``rw`` in its job hash, read
back by ``cluster_rate_waited.lua``).

Cost: a task without a limit pays nothing (its headers are already decoded); a limited one
pays one call to its key's slot per claim and two per settle (the slot, then the wake-up;
a rate-limited one a second call at claim, ``cluster_rate_waited``), plus one to its
queue's slot when it has to wait.

``limits()``/``rates()`` list the keys of ``{<prefix>}:limits:seen`` (ZSET ``c:<key>`` /
``r:<key>`` -> last used, ms), one call per key; a key unused for :data:`SEEN_FORGET` with
nothing running or waiting is dropped from it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis.exceptions

from potatoq.brokers.base import Delivery
from potatoq.brokers.limits import (
    LimitUsage,
    RateUsage,
    concurrency_of,
    rate_of,
    rate_usage_reply,
    usage_row,
    validate_limit,
    validate_rate,
)
from potatoq.exceptions import OperationalError
from potatoq.utils.package_files import files as package_files

from .outbox import ClusterParts
from .scripts import Script, cluster_scripts

log = logging.getLogger("potatoq.brokers.redis")

#: The RabbitMQ broker's limit scripts this broker runs in a limit's own slot.
LIMIT_SCRIPTS = (
    "limit_set",
    "limit_usage",
    "rate_set",
    "rate_usage",
    "slot_release",
    "slot_renew",
    "slot_take",
    "unique_release",
    "unique_take",
)
#: Milliseconds a task whose concurrency slot isn't free waits before it tries again
#: (unless a slot of its key is given back in its queue first).
SLOT_WAIT = 1000
#: Milliseconds a task waiting for a rate token waits at most before it looks again: a
#: backstop only, since ``set_rate`` makes every waiting task of the key due at once (so a
#: task waiting an hour for its token isn't claimed again every few seconds meanwhile).
RATE_RECHECK = 300_000
#: How long (ms) past its retry a waiting task is still listed as waiting in ``limits()``.
LISTED = 30_000
#: Seconds between two refreshes of a key's "last used" time by one process.
SEEN_EVERY = 30.0
#: Seconds after which an idle key leaves the ``limits:seen`` list.
SEEN_FORGET = 600.0


@functools.cache
def limit_scripts() -> dict[str, Script]:
    """The RabbitMQ broker's limit scripts, read from their files (not imported: a broker
    package imports no other broker)."""
    folder = package_files("potatoq.brokers").joinpath("rabbitmq").joinpath("lua")
    found = {}
    for name in LIMIT_SCRIPTS:
        source = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
        found[name] = Script(name, source, hashlib.sha1(source.encode()).hexdigest(), source)
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ClusterLimits(ClusterParts):
    """Limits in their own slots (mixed into :class:`~.cluster.RedisClusterBroker`)."""

    if TYPE_CHECKING:
        _seen_at: dict[str, float]

        def _eval_at(self, prefix: str, script: Script, args: Sequence[str | bytes | int]) -> Any: ...

    # -- where things live --------------------------------------------------------------------

    def _key_prefix(self, key: str) -> str:
        return "{" + self.keys.base + ":k:" + key + "}:"

    def _at_key(self, key: str, name: str, args: Sequence[str | bytes | int]) -> Any:
        return self._eval_at(self._key_prefix(key), limit_scripts()[name], args)

    @property
    def _seen_key(self) -> str:
        return f"{self.keys.prefix}limits:seen"

    def _seen(self, member: str, *, force: bool = False) -> None:
        """Note that ``member`` (``c:<key>`` or ``r:<key>``) is in use, at most every
        :data:`SEEN_EVERY` seconds per process."""
        now = time.monotonic()
        if not force and now - self._seen_at.get(member, -SEEN_EVERY) < SEEN_EVERY:
            return
        with self._errors():
            self._client().zadd(self._seen_key, {member: int(time.time() * 1000)})
        self._seen_at[member] = now

    def _seen_keys(self, kind: str) -> list[tuple[str, float]]:
        with self._errors():
            rows = self._client().zrange(self._seen_key, 0, -1, withscores=True)
        found = [(_text(member), score / 1000.0) for member, score in rows]
        return [(name[2:], at) for name, at in found if name.startswith(kind + ":")]

    def _forget_idle(self, member: str, last_used: float) -> None:
        if time.time() - last_used > SEEN_FORGET:
            with self._errors():
                self._client().zrem(self._seen_key, member)

    # -- run time, usage ----------------------------------------------------------------------

    def set_limit(self, key: str, limit: int | None) -> None:
        key, limit = validate_limit(key, limit)
        self._seen(f"c:{key}", force=True)
        self._at_key(key, "limit_set", [key, "" if limit is None else limit])
        self._wake_all("s", key)  # a raised limit: the waiting tasks try again now

    def limits(self) -> list[LimitUsage]:
        found = []
        for key, last_used in self._seen_keys("c"):
            rows = self._at_key(key, "limit_usage", [])
            if not rows:
                self._forget_idle(f"c:{key}", last_used)
            for name, limit, *rest in rows:
                found.append(usage_row((_text(name), _text(limit) or None, *rest)))
        return sorted(found, key=lambda u: u.key)

    def set_rate(self, key: str, rate: str | float | None, burst: int | None = None) -> None:
        key, per_second, checked = validate_rate(key, rate, burst)
        step = "" if per_second is None else repr(1000.0 / per_second)
        self._seen(f"r:{key}", force=True)
        self._at_key(key, "rate_set", [key, step, checked])
        self._wake_all("r", key)  # they wait for tokens of the old rate

    def rates(self) -> list[RateUsage]:
        found: list[RateUsage] = []
        for key, last_used in self._seen_keys("r"):
            rows = self._at_key(key, "rate_usage", [])
            if not rows:
                self._forget_idle(f"r:{key}", last_used)
            found.extend(rate_usage_reply(row) for row in rows)
        return sorted(found, key=lambda u: u.key)

    def _wake_all(self, kind: str, key: str) -> None:
        for queue in self._queues():
            self._run_at(self.keys.of_queue(queue), "cluster_limit_wake", [kind, key, "0"])

    # -- claim, settle, extend ----------------------------------------------------------------

    def _admit(self, delivery: Delivery) -> bool:
        """True when ``delivery`` may run now (its slot, if it has a limit, is taken); else
        it was put back to wait (``cluster_limit_defer.lua``) and the caller claims on.
        When its key's master can't be reached, it is put back to wait too (if its queue's
        can be), not left to run out its lease, and the error is raised."""
        try:
            return self._admit_now(delivery)
        except (OperationalError, redis.exceptions.RedisError):
            try:
                self._defer(delivery, SLOT_WAIT, "s", "", "")
            except (OperationalError, redis.exceptions.RedisError) as exc:
                log.warning("putting back %s failed (its lease runs out): %r", delivery.id, exc)
            raise

    def _admit_now(self, delivery: Delivery) -> bool:
        message = delivery.message
        if message is None:
            return True
        slot = concurrency_of(message.headers)
        rate = rate_of(message.headers)
        if slot is None and rate is None:
            return True
        prefix = self.keys.of_queue(delivery.queue)
        waited = ""
        if rate is not None and self._run_at(prefix, "cluster_rate_waited", [delivery.id, delivery.token]):
            waited = "1"
        if slot is not None:
            key, carried = slot
            self._seen(f"c:{key}")
            lease = str(int(self.config.dead_after * 1000))
            taking: list[str | bytes | int] = [
                key,
                carried,
                delivery.token,
                lease,
                delivery.id,
                SLOT_WAIT + LISTED,
            ]
            if not self._at_key(key, "slot_take", taking):
                self._defer(delivery, SLOT_WAIT, "s", key, waited)
                return False
        if rate is not None:
            key, per_second, burst = rate
            self._seen(f"r:{key}")
            args: list[str | bytes | int] = [
                key,
                repr(1000.0 / per_second),
                burst,
                delivery.id,
                LISTED,
                waited,
            ]
            wait = int(self._eval_at(self._key_prefix(key), cluster_scripts()["cluster_rate_take"], args))
            if wait > 0:
                if slot is not None:
                    self._at_key(slot[0], "slot_release", [slot[0], delivery.token])
                self._defer(delivery, min(wait, RATE_RECHECK), "r", key, "1")
                return False
        return True

    def _defer(self, delivery: Delivery, wait_ms: int, kind: str, key: str, waited: str) -> None:
        args = [delivery.id, delivery.token, str(wait_ms), kind, key, waited]
        self._run_at(self.keys.of_queue(delivery.queue), "cluster_limit_defer", args)

    def _release_slot(self, delivery: Delivery) -> bool:
        """After the settle of ``delivery``: give its slot back and make one task of its
        queue waiting on the key due now (True if one was). A failure is left to the lease
        (it runs out)."""
        message = delivery.message
        slot = None if message is None else concurrency_of(message.headers)
        if slot is None:
            return False
        try:
            self._at_key(slot[0], "slot_release", [slot[0], delivery.token])
            prefix = self.keys.of_queue(delivery.queue)
            return bool(self._run_at(prefix, "cluster_limit_wake", ["s", slot[0], "1"]))
        except (OperationalError, redis.exceptions.RedisError) as exc:
            log.warning("giving back the slot of %s failed (its lease runs out): %r", delivery.id, exc)
            return False

    def _renew_slots(self, deliveries: Sequence[Delivery], ttl: float) -> None:
        """Renew the slot leases of ``deliveries`` with their task leases (``extend``)."""
        by_key: dict[str, list[str]] = {}
        for delivery in deliveries:
            message = delivery.message
            slot = None if message is None else concurrency_of(message.headers)
            if slot is not None:
                by_key.setdefault(slot[0], []).append(delivery.token)
        for key, tokens in by_key.items():
            self._seen(f"c:{key}")
            args: list[str | bytes | int] = [str(int(ttl * 1000))]
            for token in tokens:
                args += [key, token]
            self._at_key(key, "slot_renew", args)

    # -- revoke and purge ---------------------------------------------------------------------

    def _unlist(self, entries: Sequence[tuple[str, str, str]]) -> None:
        """Take ``(kind, key, task id)`` of deleted tasks off their key's waiting list
        (``cl:wait:``/``rl:wait:`` of the RabbitMQ scripts' layout), so ``limits()`` and
        ``rates()`` stop counting them at once rather than after :data:`LISTED`."""
        with self._errors():
            pipe = self._client().pipeline(transaction=False)
            for kind, key, task_id in entries:
                name = "cl:wait:" if kind == "s" else "rl:wait:"
                pipe.zrem(f"{self._key_prefix(key)}{name}{key}", task_id)
            pipe.execute()

    def _unlist_revoked(self, delivery_id: str, headers: Any) -> None:
        entries = []
        slot, rate = concurrency_of(headers), rate_of(headers)
        if slot is not None:
            entries.append(("s", slot[0], delivery_id))
        if rate is not None:
            entries.append(("r", rate[0], delivery_id))
        if entries:
            self._unlist(entries)

    def _limit_waiters(self, queue: str) -> list[tuple[str, str, str]]:
        """``(kind, key, task id)`` of the tasks of ``queue`` listed as waiting on a limit."""
        prefix = self.keys.of_queue(queue)
        client = self._client()
        with self._errors():
            waits = [_text(w) for w in client.smembers(f"{prefix}lwaits")]
            if not waits:
                return []
            pipe = client.pipeline(transaction=False)
            for wait in waits:
                pipe.zrange(f"{prefix}lwait:{wait}", 0, -1)
            rows = pipe.execute()
        found = []
        for wait, ids in zip(waits, rows, strict=True):
            kind, _, key = wait.partition(":")
            found += [(kind, key, _text(i)) for i in ids]
        return found

    def _unlist_purged(self, queue: str, waiters: Sequence[tuple[str, str, str]]) -> None:
        """After a purge of ``queue``: unlist ``waiters`` whose task is gone."""
        if not waiters:
            return
        prefix = self.keys.of_queue(queue)
        with self._errors():
            pipe = self._client().pipeline(transaction=False)
            for _, _, task_id in waiters:
                pipe.exists(f"{prefix}job:{task_id}")
            present = pipe.execute()
        self._unlist([w for w, there in zip(waiters, present, strict=True) if not there])
