"""Concurrency and rate limits on RabbitMQ: slots and tokens in the result backend (see
:mod:`.store`), a task over its limit parked in the delay cascade.

A claim of a delivery that carries a limit (``cl``/``rl`` headers, see
:mod:`potatoq.brokers.limits`) asks the store, in one atomic script each:

* **concurrency**: a slot is a holder (the delivery's token) in the key's sorted set,
  scored by a lease expiry. This process renews the leases of the slots it holds every
  third of ``limit_lease`` (a transport option, 20 s by default) and gives a slot back
  after its settle's ack; a process that dies stops renewing, and the next claim of the key
  drops its expired holders, so a killed worker never leaks a slot (it comes back within
  ``limit_lease``). A task whose slot isn't free is *parked*: published again (confirmed)
  into the delay cascade for :data:`SLOT_WAIT` seconds, then acked. It doesn't count as a
  delivery and holds no worker thread, but each parked try costs one publish, and the
  cascade's resolution is whole seconds.
* **rate**: GCRA on the key's theoretical arrival time, by the store's clock. With no
  token now, a claim *reserves* the next one for the task only when it is due within
  :data:`RESERVE_AHEAD` (the key's time moves on, as if taken); the task then carries
  :data:`H_RATE_TOKEN` and is waited for in this process (``Intake.hold_op``: the delivery
  stays unacked, no thread is taken, and the claim takes another delivery beside it with
  ``basic.get``, so the process keeps running tasks meanwhile). A token further off is not
  reserved: the task is parked and takes a place in the key's *line* of waiters (one token
  apart, after the last), coming back about when its place is due, in whole seconds rounded
  down and at most :data:`RATE_RECHECK` at a time, or longer with many waiting (see
  :data:`RATE_LOOKS`); back early it keeps its place. Why not
  reserve further: a parked task comes back at the tail of its queue, possibly behind a
  backlog, and a token spent late starts in a burst with the current ones (every 1 s window
  must hold at most rate + burst starts). For the same reason a held token spent more than
  a burst's worth of tokens after its time (the process stalled) is given up for a fresh
  one. A rate set at run time starts a new generation, and a task coming back with a
  token of an older one takes a fresh one. Each parked try is one publish.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from potatoq.brokers.base import Broker, Delivery
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
from potatoq.brokers.rabbitmq import delay
from potatoq.brokers.rabbitmq.ops import Publish
from potatoq.brokers.rabbitmq.session import Outgoing, properties_for
from potatoq.brokers.rabbitmq.store import LimitStore, has_store, store_of
from potatoq.brokers.rabbitmq.topology import H_ONCE, H_PRIOR
from potatoq.exceptions import OperationalError

if TYPE_CHECKING:
    from potatoq.brokers.rabbitmq.consume import Pending
    from potatoq.brokers.rabbitmq.options import RabbitMQOptions

log = logging.getLogger("potatoq.brokers.rabbitmq")

#: Seconds a task whose concurrency slot isn't free waits in the cascade before it tries again.
SLOT_WAIT = 1
#: Header of a parked task that holds a reserved rate token: ``[key, due ms, generation]``.
H_RATE_TOKEN = "x-potatoq-rate-token"
#: Seconds a task waiting for a rate token stays parked at most before it looks again, so
#: that a rate set at run time reaches tasks already waiting (see ``rate_set.lua``) ...
RATE_RECHECK = 10.0
#: ... unless more than ``RATE_LOOKS x RATE_RECHECK`` wait on the key: then their number ÷
#: RATE_LOOKS seconds, so that a key's waiting tasks look again (one publish each) at most
#: RATE_LOOKS times a second in all.
RATE_LOOKS = 10
#: Seconds ahead a claim reserves a rate token, to wait for it in the process (less than the
#: cascade's one-second step); a task whose token is further off reserves nothing and is
#: parked: it would come back at the tail of its queue, maybe late behind a backlog, and a
#: token spent late would start in a burst with the current ones.
RESERVE_AHEAD = 1.0
#: Seconds late a reserved token may still be spent (at least: half the burst's tolerance
#: when larger, see ``rate_take.lua``); later, its process stalled and the task takes a
#: fresh token, so that the tokens of a stall don't all start at once when it ends.
STALE_AFTER = 0.025
#: How long (ms) past its return a parked task is still listed as waiting, should it never
#: come back (purged, or its queue deleted).
_LISTED_MS = 30_000


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _token(value: Any) -> list[Any] | None:
    """A reserved rate token read back from a header (None when absent or malformed)."""
    if not isinstance(value, list | tuple) or len(value) != 3:
        return None
    try:
        return [_text(value[0]), int(value[1]), int(value[2])]
    except (TypeError, ValueError):
        return None


class _Leases:
    """The slots this process holds, renewed by a daemon thread while there are any."""

    def __init__(self, store: LimitStore, lease: float) -> None:
        self.pid = os.getpid()
        self.store = store
        self.lease = lease
        self.held: dict[str, str] = {}  # holder (delivery token) -> limit key
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None
        self.stopped = False  # the broker closed: the thread ends instead of renewing

    def add(self, holder: str, key: str) -> None:
        with self.cond:
            self.held[holder] = key
            if self.thread is None:
                self.thread = threading.Thread(target=self._renew, name="potatoq-limit-leases", daemon=True)
                self.thread.start()

    def pop(self, holder: str) -> str | None:
        with self.cond:
            return self.held.pop(holder, None)

    def stop(self) -> None:
        """End the renewing thread (the broker closed: its store may be gone). Slots still
        held lapse after their lease, as a killed holder's do."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def _renew(self) -> None:
        while True:
            with self.cond:
                if self.cond.wait_for(lambda: self.stopped, self.lease / 3):
                    return
                pairs = [x for holder, key in self.held.items() for x in (key, holder)]
            if pairs:
                try:
                    self.store.run("slot_renew", [int(self.lease * 1000), *pairs])
                except OperationalError as exc:  # the next round tries again; the lease has slack
                    log.warning("renewing concurrency-limit leases failed: %s", exc)


class RabbitMQLimits(Broker):
    """``set_limit``/``limits``/``set_rate``/``rates`` and the claim's limit check (mixed
    into :class:`~.broker.RabbitMQBroker`)."""

    if TYPE_CHECKING:
        backend: Broker | None
        options: RabbitMQOptions
        _lock: threading.Lock
        _leases: _Leases | None

    def _store(self, what: str = "concurrency and rate limits") -> LimitStore:
        return store_of(self.backend, what)

    # ------------------------------------------------------------------ run time, usage

    def set_limit(self, key: str, limit: int | None) -> None:
        key, limit = validate_limit(key, limit)
        self._store().run("limit_set", [key, "" if limit is None else limit])

    def limits(self) -> list[LimitUsage]:
        if not has_store(self.backend):  # nothing can be limited then (refused at send)
            return []
        rows = self._store().run("limit_usage", [])
        return [usage_row((_text(key), _text(limit) or None, *rest)) for key, limit, *rest in rows]

    def set_rate(self, key: str, rate: str | float | None, burst: int | None = None) -> None:
        key, per_second, checked = validate_rate(key, rate, burst)
        step = "" if per_second is None else repr(1000.0 / per_second)
        self._store().run("rate_set", [key, step, checked])

    def rates(self) -> list[RateUsage]:
        if not has_store(self.backend):  # nothing can be limited then (refused at send)
            return []
        return [rate_usage_reply(row) for row in self._store().run("rate_usage", [])]

    # ------------------------------------------------------------------ claim and settle

    def _stop_leases(self) -> None:
        """On close: end this process's renewal thread (it would renew in a store that may
        be gone); a slot still held lapses after its lease."""
        leases, self._leases = self._leases, None
        if leases is not None and leases.pid == os.getpid():
            leases.stop()

    def _lease_book(self, store: LimitStore) -> _Leases:
        leases = self._leases
        if leases is None or leases.pid != os.getpid():
            with self._lock:
                leases = self._leases
                if leases is None or leases.pid != os.getpid():
                    leases = self._leases = _Leases(store, self.options.limit_lease)
        return leases

    def _limit_wait(self, delivery: Delivery, pending: Pending) -> tuple[float, list[Any] | None] | None:
        """None when ``delivery`` may run now (its slot, if any, is taken); else the
        seconds it is to wait and the rate token it holds, if any."""
        message = delivery.message
        if message is None:
            return None
        slot = concurrency_of(message.headers)
        rate = rate_of(message.headers)
        if slot is None and rate is None:
            return None
        store = self._store()
        headers = getattr(pending.properties, "headers", None) or {}
        token = _token(headers.get(H_RATE_TOKEN))
        if slot is not None:
            key, carried = slot
            listed = SLOT_WAIT * 1000 + _LISTED_MS
            lease_ms = int(self.options.limit_lease * 1000)
            if not store.run("slot_take", [key, carried, delivery.token, lease_ms, delivery.id, listed]):
                return SLOT_WAIT, token
        if rate is not None:
            key, per_second, burst = rate
            due, gen = ("", "") if token is None else (token[1], token[2])
            horizon, longest = int(RESERVE_AHEAD * 1000), int(RATE_RECHECK * 1000)
            args = [key, repr(1000.0 / per_second), burst, delivery.id, _LISTED_MS, due, gen]
            args += [horizon, longest, int(STALE_AFTER * 1000), RATE_LOOKS]
            reply = store.run("rate_take", args)
            if int(reply[0]) > 0:
                if slot is not None:
                    store.run("slot_release", [slot[0], delivery.token])
                wait = float(reply[0]) / 1000.0  # cut by the script (RATE_RECHECK, RATE_LOOKS)
                if int(reply[1]) == 0:
                    # Nothing reserved: parked until about its place in the key's line, in
                    # whole seconds rounded down (early, it keeps its place and holds the
                    # token once due within RESERVE_AHEAD; late, the token may pass unused).
                    return float(max(1, int(wait))), None
                return min(wait, RATE_RECHECK), [key, int(reply[1]), int(reply[2])]
        if slot is not None:
            self._lease_book(store).add(delivery.token, slot[0])
        return None

    def _parked(self, pending: Pending, seconds: int, token: list[Any] | None) -> Outgoing:
        """The delivery published again into the cascade for ``seconds`` (whole), its
        delivery count so far carried on (so parking never counts as a delivery)."""
        old = getattr(pending.properties, "headers", None) or {}
        headers: dict[str, object] = {H_PRIOR: pending.delivery_count}
        if old.get(H_ONCE):
            headers[H_ONCE] = 1
        if token is not None:
            headers[H_RATE_TOKEN] = token
        props = properties_for(getattr(pending.properties, "message_id", None), headers)
        seconds = max(1, seconds)
        publish = Publish(
            delay.entry_exchange(seconds), delay.routing_key(seconds, pending.amqp_queue), pending.body, props
        )
        return Outgoing(publish, pending.queue, delayed=True)

    def _release_slot(self, delivery: Delivery) -> None:
        """Give back the slot ``delivery`` holds, if any (after its settle's ack)."""
        leases = self._leases
        if leases is None or leases.pid != os.getpid():
            return
        key = leases.pop(delivery.token)
        if key is not None:
            self._store().run("slot_release", [key, delivery.token])
