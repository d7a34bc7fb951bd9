"""Taking deliveries: ``claim()``, ``wait()`` and ``settle_and_claim()`` mapped onto AMQP
for one process.

* Consumers run on every band queue of the queues a worker asks for (started by ``wait``,
  and by ``settle_and_claim`` on a busy worker), on the work channel, each with the link's
  prefetch (``worker_prefetch_multiplier`` x the process's slots; 1 by default). Pushed
  deliveries go to this process's buffer; a claim takes the best one there: potatoq queues
  in the order given, bands highest first, then arrival order.
* A busy worker's cycle is ``settle_and_claim``: publish follow-ups (confirmed), ack, then
  the best buffered delivery. Acking frees a prefetch slot, so RabbitMQ pushes that band's
  next message once it has processed the ack (no barrier round trip); if it isn't there yet,
  the worker waits for it (``wait`` returns as soon as it is pushed). With nothing to
  publish, the ack is posted to the I/O thread without waiting for it. No ready counts, no
  ``basic.get``.
* ``claim`` on an empty buffer of a process not consuming yet (a worker's first claim, a
  test) with a prefetch of 1 is exact: it asks the band queues' ready counts (passive
  declares, all at once) and takes one with ``basic.get``. With a larger prefetch it starts
  the consumers instead and returns None (the caller waits for the push): a ``basic.get`` on
  top would hold one more than the prefetch. While consumers run for the queues asked, a
  claim takes only what was pushed (a ``basic.get`` would race the push, whose message would
  then wait here while the task runs); ``wait`` returns on the next push. The exception:
  deliveries held for their rate token (``hold_op``) fill the prefetch without running, so
  while fewer than the prefetch run, a claim takes one more with ``basic.get``
  (``beside_held_op``) rather than idle until the token is due.
* Nothing waits in a local buffer beyond the prefetch: the held deliveries (running and,
  with a multiplier above 1, prefetched) fill their consumer's prefetch, so that consumer
  gets nothing more until an ack. When another consumer (another band or -Q queue) pushes
  a delivery that takes this process above its prefetch, every consumer is *paused*
  (cancelled): that one delivery (at most
  one per consumer, from the same instant) stays buffered and is the next claim's (giving it
  back would count towards its delivery limit on RabbitMQ 4.0); the consumers start again
  at the next ``settle_and_claim`` or ``wait`` that finds the buffer empty. Until RabbitMQ
  has answered every cancel, no ack or nack is sent (one round trip, after a pause only):
  an ack overtaking a cancel would free a slot whose next message RabbitMQ could then
  return from the cancelled consumer, counted as a delivery (see ``_after_cancels``).

Every delivery is fenced with a token naming this process's link and the work channel's
generation (see :class:`~.io.AmqpLink`): when the channel or connection is
replaced, RabbitMQ has already returned its unacked deliveries to their queues, so a
settle of one of them is refused. A settle after the I/O thread stalled (the process was
stopped) or after holding the delivery for half the heartbeat timeout first checks with
a round trip that the connection survived, before any result is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import Sequence
from typing import Any

import pika.channel

from potatoq.brokers.rabbitmq.acks import AckGroup
from potatoq.brokers.rabbitmq.declare import cancel_keeping
from potatoq.brokers.rabbitmq.giveback import GiveBack
from potatoq.brokers.rabbitmq.holds import RateHolds
from potatoq.brokers.rabbitmq.io import AmqpLink
from potatoq.brokers.rabbitmq.ops import ChannelLost, Op
from potatoq.brokers.rabbitmq.session import Outgoing, Session
from potatoq.brokers.rabbitmq.topology import H_PRIOR

_arrival = itertools.count()


@dataclasses.dataclass(slots=True)
class Pending:
    """A delivery received on the work channel and not settled yet."""

    tag: int
    generation: int
    amqp_queue: str
    queue: str  # the potatoq queue
    band: int
    properties: Any
    body: bytes
    redelivered: bool
    seq: int = dataclasses.field(default_factory=lambda: next(_arrival))
    handed_at: float = 0.0  # monotonic, when a claim handed it out
    pushed_at: float = 0.0  # monotonic, when a consumer pushed it (0: taken with basic.get)
    # Wall clock (epoch s) of that hand-out: the fence of its result (see brokers.records, fenced writes).
    # A later claim of the same message follows the loss of this one's channel, so it is
    # later by at least that, on any host whose clock agrees to within it.
    claimed_at: float = 0.0

    @property
    def delivery_count(self) -> int:
        """Earlier deliveries of this message: RabbitMQ's count (it omits the header on the
        first delivery, 4.0) plus those before a graceful requeue re-published it."""
        headers = getattr(self.properties, "headers", None) or {}
        try:
            return int(headers.get("x-delivery-count") or 0) + int(headers.get(H_PRIOR) or 0)
        except (TypeError, ValueError):
            return 0


class Intake(RateHolds, GiveBack):
    """Consumers, the local buffer and handed-out deliveries of one process."""

    def __init__(self, session: Session, hold: float = 1.0) -> None:
        self.session = session
        self.link: AmqpLink = session.link
        # Seconds a prefetched delivery may wait while every thread here is busy, before
        # it is given back for another worker (see hand_back_stale).
        self.hold = hold
        self._handing_back = False
        # The link's: a thread waiting for a push may drive the connection itself (see
        # .baton), and the driver's callbacks notify the others with it.
        self.cond = self.link.cond
        # Guarded by cond (read by waiting threads, written on the I/O thread):
        self._buffer: list[Pending] = []
        self._waiting = 0
        self._interrupted = 0
        # interrupt() count when each thread's last wait() returned: one made since (even
        # before that thread's next wait started) makes the next wait() return at once.
        self._seen = threading.local()
        self._lost = 0  # bumped when the work channel goes away, so waiters wake up
        # I/O thread only:
        self._consumers: dict[str, str] = {}  # amqp queue -> consumer tag
        self._by_tag: dict[str, tuple[str, int, str]] = {}  # consumer tag -> (queue, band, amqp)
        self._handed: dict[int, Pending] = {}  # delivery tag -> delivery (current generation)
        self._held: set[int] = set()  # tags of handed deliveries waiting in hold_op
        self._giving_back: list[int] = []  # tags being published again by _give_back
        # Acks of finished tasks that wait to go in one frame (a prefetch above 1, see .acks);
        # whoever is about to block on the connection sends them first.
        self.acks = AckGroup(self._lowest_open)
        self.link.before_wait = self.acks.flush
        self._wanted: list[tuple[str, int, str]] = []  # what wait() consumes
        self._orders: dict[tuple[str, ...], tuple[list[tuple[str, int, str]], dict[str, int]]] = {}
        # The potatoq queues whose every band has a live consumer (None: paused); read by
        # waiting threads without the I/O thread, written on the I/O thread.
        self._consuming: frozenset[str] | None = None
        # I/O thread only: batches of basic.cancel sent, and how many of them RabbitMQ is
        # known to have processed (see _after_cancels).
        self._cancels_sent = 0
        self._cancels_done = 0
        # Set by interrupt() (shutdown): the next settle pauses the consumers and gives
        # back what was pushed meanwhile, so an exiting process holds nothing unrun.
        self._draining = False

    # ------------------------------------------------------------------ order of queues

    def _ordered(self, queues: Sequence[str]) -> tuple[list[tuple[str, int, str]], dict[str, int]]:
        """(queue, band, AMQP queue) in claim order, and each AMQP queue's rank in it.
        Computed once per list of queues (a worker asks with the same few lists before
        every task); callers never modify them."""
        key = tuple(queues)
        cached = self._orders.get(key)
        if cached is None:
            order = [
                (queue, band, amqp)
                for queue in queues
                for band, amqp in self.session.topo.bands_high_first(queue)
            ]
            if len(self._orders) >= 64:  # many callers with different lists: stay small
                self._orders.clear()
            cached = self._orders[key] = (order, {amqp: i for i, (_q, _b, amqp) in enumerate(order)})
        return cached

    def _order(self, queues: Sequence[str]) -> list[tuple[str, int, str]]:
        return self._ordered(queues)[0]

    def _pop_buffered(self, queues: Sequence[str]) -> Pending | None:
        rank = self._ordered(queues)[1]
        with self.cond:
            best: Pending | None = None
            for item in self._buffer:
                if item.amqp_queue in rank and (
                    best is None or (rank[item.amqp_queue], item.seq) < (rank[best.amqp_queue], best.seq)
                ):
                    best = item
            if best is not None:
                self._buffer.remove(best)
            return best

    def _has_buffered(self, queues: Sequence[str]) -> bool:
        # ``in`` a worker's few queue names: cheaper than a set made at every call (several
        # per task, while waiting for a push).
        return any(item.queue in queues for item in self._buffer)

    # ------------------------------------------------------------------ operations

    def claim_op(self, queues: Sequence[str]) -> Op[Pending | None]:
        self._draining = False
        for queue in queues:
            yield from self.session.ensure(queue)
        order = self._order(queues)
        pending = self._pop_buffered(queues)
        if pending is None and self.consuming(queues):
            # Consumers run for these queues: a ready message is pushed to them (the worker
            # waits for it). A basic.get now would race that push, and the pushed message
            # would then sit here while the task got runs.
            return None
        if pending is None and self.link.prefetch > 1:
            # A process that holds more than one delivery per consumer (a worker's threads,
            # or a prefetch multiplier) takes them only as pushed: a basic.get on top would
            # make it hold one more than its prefetch. The caller waits for the push.
            self._resume(queues)
            return None
        if pending is None:
            try:
                pending = yield from self._get_first(order)
            except ChannelLost:
                # The work channel closed under us (e.g. a queue was deleted): whatever it
                # held is back in its queue. Nothing claimed; the caller tries again.
                self.session.declared.clear()
                return None
        if pending is None:
            return None
        return self._hand_out(pending)

    def _hand_out(self, pending: Pending) -> Pending:
        pending.handed_at = time.monotonic()
        pending.claimed_at = time.time()
        self._handed[pending.tag] = pending
        return pending

    def _get_first(self, order: list[tuple[str, int, str]]) -> Op[Pending | None]:
        """basic.get from the first band queue, in ``order``, that has a ready message.

        With several queues to choose from, their ready counts are asked first, all at once
        (a basic.get on an empty quorum queue costs a Raft round; a passive declare doesn't).
        """
        counts: list[int | None] = [None] * len(order)
        if len(order) > 1:
            counts = yield self.link.ready_counts([amqp for _q, _b, amqp in order])
        for (queue, band, amqp), ready in zip(order, counts, strict=True):
            if ready == 0:
                continue
            got = yield self.link.get(amqp)
            if got is None:
                continue
            method, properties, body = got
            return Pending(
                tag=method.delivery_tag,
                generation=self.link.generation,
                amqp_queue=amqp,
                queue=queue,
                band=band,
                properties=properties,
                body=body,
                redelivered=bool(method.redelivered),
            )
        return None

    def resume_op(self, queues: Sequence[str]) -> Op[None]:
        """Start consumers on every band queue of ``queues`` (those not running yet)."""
        self._draining = False
        for queue in queues:
            yield from self.session.ensure(queue)
        self._resume(queues)

    def _resume(self, queues: Sequence[str]) -> None:
        if self.consuming(queues) and self.link.work is not None:
            return
        self._wanted = self._order(queues)
        wanted = {amqp for _q, _b, amqp in self._wanted}
        work = self.link.work
        unwanted = [self._consumers.pop(a) for a in list(self._consumers) if a not in wanted]
        if work is not None:  # queues no longer asked for
            self._cancel(work, unwanted)
        self._start_consumers()

    def _start_consumers(self) -> None:
        work = self.link.work
        if work is None or not work.is_open:
            return
        for queue, band, amqp in self._wanted:
            if amqp in self._consumers:
                continue
            tag = work.basic_consume(amqp, self._on_message, auto_ack=False)
            self._consumers[amqp] = tag
            self._by_tag[tag] = (queue, band, amqp)
        self._consuming = frozenset(queue for queue, _b, _a in self._wanted)

    def set_prefetch_op(self, prefetch: int) -> Op[None]:
        """Hold up to ``prefetch`` unacked deliveries per consumer from now on. A consumer
        keeps the prefetch it started with, so running ones are paused (what they pushed
        stays buffered) and the next ``wait`` or settle starts them again with it."""
        if prefetch == self.link.prefetch:
            return
        self.link.prefetch = prefetch
        work = self.link.work
        if work is not None and work.is_open:
            yield self.link.rpc(work.basic_qos, prefetch_count=prefetch)
            self._pause()

    def stop_consuming_op(self) -> Op[None]:
        """Cancel every consumer and give back what they pushed (the worker's set of
        claimable queues changed: a queue was paused or resumed), as at shutdown; the next
        ``wait`` subscribes to the queues it is asked for. Nothing of a paused queue then
        waits unacked here (where a long pause would hit the consumer timeout)."""
        yield from self._give_back()

    def _pause(self) -> None:
        work = self.link.work
        self._consuming = None
        consumers, self._consumers = self._consumers, {}
        if work is None:
            return
        self._cancel(work, list(consumers.values()))

    def _cancel(self, work: pika.channel.Channel, tags: Sequence[str]) -> None:
        """Cancel the consumers ``tags``, keeping what they push until the cancel-oks.
        Until RabbitMQ has processed the cancels, no ack or nack may be sent: see
        :meth:`_after_cancels`."""
        for tag in tags:
            cancel_keeping(work, tag, self._forget_cancelled(tag))
        if tags:
            self._cancels_sent += 1

    def _after_cancels(self) -> Op[None]:
        """Wait, before an ack or nack, until RabbitMQ has processed every basic.cancel sent.

        pika sends one basic.cancel at a time (the next after the cancel-ok) but an ack at
        once, so an ack can overtake a pause's later cancels. The ack frees its consumer's
        prefetch slot, and RabbitMQ hands that consumer the next message; if the cancel
        then reaches the channel before that delivery does, RabbitMQ returns the message
        to its queue, and on 4.0 that return counts as a delivery (towards the dead-letter
        limit) of a task that never reached this process. The round trip queues behind the
        cancels (pika keeps a channel's synchronous methods in order); a busy worker that
        didn't pause skips it."""
        sent = self._cancels_sent
        if self._cancels_done >= sent:
            return
        try:
            yield self.link.verify()
        except ChannelLost:
            return  # the channel is gone with its consumers; the caller's owned() check fails
        self._cancels_done = max(self._cancels_done, sent)

    def _forget_cancelled(self, tag: str) -> Any:
        """The cancel-ok callback for ``tag``. pika files every pending cancel callback of a
        channel under one key, so the first cancel-ok may run all of them: each forgets
        the tag the frame names, never its own, so a consumer still live on the server
        keeps its deliveries."""

        def on_cancel_ok(frame: Any) -> None:
            method = getattr(frame, "method", None)
            self._by_tag.pop(getattr(method, "consumer_tag", None) or tag, None)

        return on_cancel_ok

    def _on_message(self, channel: pika.channel.Channel, method: Any, properties: Any, body: bytes) -> None:
        delivering: pika.channel.Channel = channel
        if channel is not self.link.work:
            return
        queue, band, amqp = self._by_tag.get(method.consumer_tag, ("", 0, ""))
        if not amqp:
            # A delivery for a consumer we no longer know: hand it back rather than leave
            # it unacked (it would sit on this channel, never run, until the channel closes).
            delivering.basic_nack(method.delivery_tag, requeue=True)
            return
        pending = Pending(
            tag=method.delivery_tag,
            generation=self.link.generation,
            amqp_queue=amqp,
            queue=queue,
            band=band,
            properties=properties,
            body=body,
            redelivered=bool(method.redelivered),
            pushed_at=time.monotonic(),
        )
        with self.cond:
            self._buffer.append(pending)
            self.cond.notify_all()
        if self._consumers and len(self._handed) - len(self._held) + len(self._buffer) > self.link.prefetch:
            # More held here than the prefetch allows one consumer: this one came from
            # another band or queue while the process is full, and waits for a task to end.
            # Pause every consumer so no more pile up here while other workers idle.
            self._pause()

    def on_work_channel_lost(self) -> None:
        """I/O thread: the work channel is gone; RabbitMQ requeued everything it held."""
        self.acks.drop()
        self._consuming = None
        self._consumers.clear()
        self._cancels_done = self._cancels_sent  # the new channel has no consumers to cancel
        self._by_tag.clear()
        self._handed.clear()
        self._held.clear()
        # It may have closed because a queue was deleted: declare again before next use.
        self.session.declared.clear()
        with self.cond:
            self._buffer.clear()
            self._lost += 1
            self.cond.notify_all()

    def on_connected(self) -> None:
        """I/O thread: a new work channel is open; restart consumers if a thread waits."""
        with self.cond:
            waiting = self._waiting
        if waiting and self._wanted:
            self._start_consumers()

    # -- settling

    def owned(self, token: str) -> Pending | None:
        tag = self.link.owns(token)
        return None if tag is None else self._handed.get(tag)

    def is_current_now(self, token: str) -> bool | None:
        """Caller thread: :meth:`is_current_op` when it needs no round trip (None: it does).

        Reads only attributes the I/O thread replaces whole (the generation, the handed-out
        dict's entries, the tick times), so no hop to that thread is needed on a busy
        worker's path; a channel replaced right after this check still makes the ack fail.
        """
        pending = self.owned(token)
        if pending is None:
            return False
        heartbeat = self.link.heartbeat
        held = time.monotonic() - pending.handed_at
        if self.link.stalled_since(pending.handed_at) or (heartbeat and held > heartbeat / 2):
            return None
        return True

    @property
    def draining(self) -> bool:
        """Whether :meth:`interrupt` asked the next settle to give back what was pushed."""
        return self._draining

    def consuming(self, queues: Sequence[str]) -> bool:
        """Whether a consumer runs on every band queue of ``queues`` (any thread)."""
        current = self._consuming
        return current is not None and current.issuperset(queues)

    def take_buffered(self, queues: Sequence[str]) -> Pending | None:
        """Caller thread: the best delivery already pushed for ``queues``, handed out, if
        every queue was declared already (else None: :meth:`claim_op` does the rest)."""
        if not self.session.declared.issuperset(queues):
            return None
        pending = self._pop_buffered(queues)
        if pending is None:
            return None
        self._draining = False
        return self._hand_out(pending)

    def is_current_op(self, token: str) -> Op[bool]:
        """Whether the delivery of ``token`` can still be settled, before its result is
        written anywhere. A stalled process (stopped, starved) or one that held the delivery
        for half the heartbeat timeout may have lost its connection without having seen it
        yet, and RabbitMQ may have handed the message to another worker: a round trip on
        the work channel then decides (it fails on a connection the server closed)."""
        current = self.is_current_now(token)
        if current is not None:
            return current
        try:
            yield self.link.verify()
        except ChannelLost:
            return False
        return self.owned(token) is not None

    def settle_op(self, token: str, publishes: Sequence[Outgoing], action: str, forget: int = 0) -> Op[bool]:
        """Publish ``publishes`` (confirmed), then ``action`` the delivery, then a round trip
        on the work channel so the ack is known to be processed (a process may exit right
        after a settle). False, doing nothing, if the delivery is stale."""
        work = yield from self._settle(token, publishes, action, forget)
        if work is None:
            return False
        try:
            yield self.link.verify()
        except ChannelLost:
            return False  # the ack may or may not have been processed
        return True

    def settle_claim_op(
        self, token: str, publishes: Sequence[Outgoing], action: str, queues: Sequence[str]
    ) -> Op[tuple[bool, Pending | None]]:
        """A busy worker's cycle: settle, make sure the consumers of ``queues`` run, then
        the best delivery pushed meanwhile (None if nothing has arrived yet: the worker
        then waits for the push).

        No barrier after the ack: with prefetch 1, RabbitMQ pushes the band's next message
        only once it has processed the ack, so that delivery proves it (with a larger
        prefetch nothing proves it, and nothing needs to). An ack lost with the connection
        only means a redelivery (a settle of it is fenced); a process
        exiting right after its settle uses :meth:`settle_op`, which keeps the barrier."""
        work = yield from self._settle(token, publishes, action, 0)
        for queue in queues:
            yield from self.session.ensure(queue)
        pending = self._pop_buffered(queues)
        if pending is None and not self._draining:
            self._resume(queues)
        return work is not None, None if pending is None else self._hand_out(pending)

    def ack_resume(self, token: str, queues: Sequence[str]) -> None:
        """I/O thread: :meth:`ack_resume_op` as a plain call when no cancel is unanswered and
        no drain asked (the ack needs no reply, and RabbitMQ pushes the next task after it)."""
        if self._cancels_done < self._cancels_sent or self._draining:
            self.link.spawn(self.ack_resume_op(token, queues))
            return
        with self.cond:
            buffered = self._has_buffered(queues)
        pending = self.owned(token)
        work = self.link.work
        if pending is not None and work is not None and work.is_open:
            del self._handed[pending.tag]
            # The caller goes on to a buffered delivery: its ack may wait for the next one's.
            self.acks.ack(work, pending.tag, later=buffered, group=self.link.prefetch // 2)
        if not buffered:
            self._resume(queues)

    def _lowest_open(self) -> int | None:
        """Driver: the lowest tag of the work channel still open here, but for the acks
        waiting in :attr:`acks` (see :class:`~.acks.AckGroup`)."""
        generation = self.link.generation
        tags = [*self._handed, *self._giving_back]
        with self.cond:
            tags.extend(p.tag for p in self._buffer if p.generation == generation)
        return min(tags, default=None)

    def ack_resume_op(self, token: str, queues: Sequence[str]) -> Op[None]:
        """Ack ``token``'s delivery (posted, see ``RabbitMQBroker.settle_and_claim``), then start
        the consumers of ``queues`` (declared) unless a delivery for them is buffered."""
        yield from self._settle(token, (), "ack", 0)
        with self.cond:
            buffered = self._has_buffered(queues)
        if not buffered and not self._draining:
            self._resume(queues)

    def _settle(
        self, token: str, publishes: Sequence[Outgoing], action: str, forget: int
    ) -> Op[pika.channel.Channel | None]:
        """Publish ``publishes`` (confirmed), then ``action`` the delivery; returns the
        work channel it was sent on (None: the delivery is stale, nothing was done).

        * "ack": done with it (after its follow-ups, retry or dead letter were published);
        * "requeue": ``basic.nack(requeue)``, back at the head of its queue; counts as a
          delivery, as a crash should;
        * "republish": a graceful requeue. On RabbitMQ 4.0 every nack counts towards the
          delivery limit, so a task interrupted by a few worker restarts would be
          dead-lettered without having failed. Instead the same payload is published again
          (at the tail of its queue) carrying the deliveries so far in a header, then the
          delivery is acked: its count doesn't grow, crash counts before it are kept.
          ``forget`` earlier deliveries are dropped from the count too (the one a worker
          was killed in at shutdown, see ``RabbitMQBroker.prepare_kill``).
        """
        first = self.owned(token)
        if first is None:
            return None
        self.acks.flush()  # acks waiting go first: frames keep the order they were made in
        if action == "republish":
            publishes = [*publishes, self._again(first, forget)]
            action = "ack"
        if publishes:
            yield from self.session.publish_all(publishes)
        yield from self._after_cancels()
        pending = self.owned(token)
        work = self.link.work
        if pending is None or work is None or not work.is_open:
            return None
        if action == "ack":
            work.basic_ack(pending.tag)
        else:
            work.basic_nack(pending.tag, requeue=True)
        del self._handed[pending.tag]
        if self._draining:
            yield from self._give_back()
        return work

    # ------------------------------------------------------------------ caller side

    def wait(self, queues: Sequence[str], timeout: float) -> None:
        """Block until a delivery for ``queues`` is pushed, ``timeout`` passes or
        :meth:`interrupt` is called."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self.cond:
            interrupted, lost = self._interrupted, self._lost
            if self._has_buffered(queues) or getattr(self._seen, "count", 0) != interrupted:
                self._seen.count = interrupted
                return
            self._waiting += 1
        try:
            # A busy worker's consumers already run: no operation then.
            if not self.consuming(queues) or self._draining:
                with contextlib.suppress(ChannelLost):  # a spurious return; the caller claims
                    self.link.run(self.resume_op, list(queues))
            # The push is read here when no other thread drives the connection (no hop).
            self.link.wait_until(
                lambda: self._has_buffered(queues) or self._interrupted != interrupted or self._lost != lost,
                max(0.0, deadline - time.monotonic()),
            )
        finally:
            with self.cond:
                self._waiting -= 1
                self._seen.count = self._interrupted

    def interrupt(self) -> None:
        # Called from a signal handler too: only a flag and the (reentrant) condition here;
        # the I/O thread acts on the flag at the next settle.
        self._draining = True
        with self.cond:
            self._interrupted += 1
            self.cond.notify_all()
        self.link.wake()  # a thread driving the connection may be blocked in its poll
