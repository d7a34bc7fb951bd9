"""The steps operations on the RabbitMQ I/O thread await: channel RPCs, timers, opening
channels, ``basic.get``, ready counts over probe channels and confirmed publishes, plus the
delivery tokens. Mixed into :class:`~.io.AmqpLink`, whose state they read; they run on its
I/O thread only."""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pika
import pika.channel
import pika.spec
from pika.adapters.select_connection import IOLoop

from .ops import Await, ChannelLost, Publish, _ConfirmBatch


class LinkSteps:
    """The asynchronous steps of :class:`~.io.AmqpLink` (its state is declared here)."""

    describe: str
    generation: int
    nonce: str
    connection: pika.SelectConnection | None
    work: pika.channel.Channel | None
    pub: pika.channel.Channel | None
    _ioloop: IOLoop
    _ready: threading.Event
    _closing: bool
    _confirm_seq: int
    _confirms: dict[int, _ConfirmBatch]
    _get_queue: deque[tuple[str, Callable[..., None]]]
    _get_current: Callable[..., None] | None
    _probes: list[pika.channel.Channel | None]
    _probe_pending: dict[int, deque[Callable[[int | None], None]]]
    _probes_opening: set[int]

    if TYPE_CHECKING:

        def _channel_closed(self, channel: pika.channel.Channel, reason: BaseException) -> None: ...

    # ------------------------------------------------------------------ steps (I/O thread)

    def rpc(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Await:
        """A step calling the channel method ``method(*args, callback=…, **kwargs)``; it
        resumes with the reply frame. ``method`` is bound to the channel it runs on."""
        channel = getattr(method, "__self__", None)

        def start(resume: Callable[..., None]) -> None:
            method(*args, callback=lambda *frame: resume(frame[0] if frame else None), **kwargs)

        return Await(channel, start)

    def call_later(self, seconds: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O thread after ``seconds`` (call from the I/O thread)."""
        self._ioloop.call_later(seconds, fn)

    def sleep(self, seconds: float) -> Await:
        return Await(None, lambda resume: self._ioloop.call_later(seconds, resume))

    def pub_channel(self, timeout: float = 10.0) -> Await:
        """Resumes with the open publish channel, waiting while it is being reopened."""
        deadline = time.monotonic() + timeout

        def start(resume: Callable[..., None]) -> None:
            def check() -> None:
                if self.pub is not None and self.pub.is_open:
                    resume(self.pub)
                elif not self._ready.is_set():  # the connection is down: the caller retries
                    resume(error=ChannelLost(f"not connected to {self.describe}"))
                elif time.monotonic() > deadline or self._closing:
                    resume(error=ChannelLost("the publish channel didn't reopen"))
                else:
                    self._ioloop.call_later(0.01, check)

            check()

        return Await(None, start)

    def open_channel(self) -> Await:
        """A fresh channel for a step that may fail with a channel error."""

        def start(resume: Callable[..., None]) -> None:
            if self.connection is None or not self.connection.is_open:
                resume(error=ChannelLost("not connected"))
                return

            def opened(channel: pika.channel.Channel) -> None:
                channel.add_on_close_callback(self._channel_closed)
                resume(channel)

            self.connection.channel(on_open_callback=opened)

        return Await(None, start)

    def verify(self) -> Await:
        """A round trip on the work channel: resumes once RabbitMQ has processed every
        method sent on it before (methods on a channel are processed in order), or fails
        with :class:`ChannelLost` if the channel or connection is gone. A passive declare
        of a built-in exchange is the cheapest reply RabbitMQ gives."""
        channel = self.work
        if channel is None or not channel.is_open:
            return Await(None, lambda resume: resume(error=ChannelLost("the work channel is not open")))
        return self.rpc(channel.exchange_declare, "amq.direct", passive=True)

    def get(self, queue: str) -> Await:
        """basic.get on the work channel: resumes with (method, properties, body) or None."""
        channel = self.work

        def start(resume: Callable[..., None]) -> None:
            if channel is None or not channel.is_open:
                resume(error=ChannelLost("the work channel is being reopened"))
                return
            self._get_queue.append((queue, resume))
            self._next_get()

        return Await(channel, start)

    def _next_get(self) -> None:
        if self._get_current is not None or not self._get_queue or self.work is None:
            return
        queue, resume = self._get_queue.popleft()
        self._get_current = resume

        def got(_channel: Any, method: Any, properties: Any, body: bytes) -> None:
            self._get_current = None
            resume((method, properties, body))
            self._next_get()

        self.work.basic_get(queue, got, auto_ack=False)

    def _on_get_empty(self, _frame: Any) -> None:
        resume, self._get_current = self._get_current, None
        if resume is not None:
            resume(None)
        self._next_get()

    def ready_counts(self, queues: list[str]) -> Await:
        """Ready messages of each queue, asked all at once (one round trip): resumes with
        a list of ints, None where unknown (a probe channel still opening, or closed)."""

        def start(resume: Callable[..., None]) -> None:
            results: list[int | None] = [None] * len(queues)
            pending = set(range(len(queues)))

            def done(index: int, value: int | None) -> None:
                if index not in pending:
                    return
                pending.discard(index)
                results[index] = value
                if not pending:
                    resume(results)

            for index, queue in enumerate(queues):
                channel = self._probe_channel(index)
                if channel is None:
                    done(index, None)
                    continue
                self._probe_pending.setdefault(id(channel), deque()).append(functools.partial(done, index))

                def answered(frame: Any, ch: Any = channel) -> None:
                    waiting = self._probe_pending.get(id(ch))
                    if waiting:
                        waiting.popleft()(int(frame.method.message_count))

                channel.queue_declare(queue, passive=True, callback=answered)

        return Await(None, start)

    def _probe_channel(self, index: int) -> pika.channel.Channel | None:
        """Probe channel ``index`` if open; else start opening it and return None."""
        while len(self._probes) <= index:
            self._probes.append(None)
        channel = self._probes[index]
        if channel is not None and channel.is_open:
            return channel
        if index not in self._probes_opening and self.connection is not None and self.connection.is_open:
            self._probes_opening.add(index)

            def opened(new: pika.channel.Channel) -> None:
                self._probes_opening.discard(index)
                new.add_on_close_callback(self._on_probe_closed)
                self._probes[index] = new

            self.connection.channel(on_open_callback=opened)
        return None

    def _on_probe_closed(self, channel: pika.channel.Channel, _reason: BaseException) -> None:
        for i, probe in enumerate(self._probes):
            if probe is channel:
                self._probes[i] = None
        for callback in self._probe_pending.pop(id(channel), deque()):
            callback(None)

    def publish(self, items: list[Publish]) -> Await:
        """Publish ``items`` (mandatory, confirmed) and resume once every one is confirmed.

        Each item's ``returned`` (unroutable) and ``nacked`` flags say what happened. All
        confirms of a batch are awaited together: one wait for the batch, not per message.
        """
        channel = self.pub

        def start(resume: Callable[..., None]) -> None:
            if channel is None or not channel.is_open:
                resume(error=ChannelLost("publish channel is not open"))
                return
            batch = _ConfirmBatch(pending=set(), items={})
            for item in items:
                self._confirm_seq += 1
                seq = self._confirm_seq
                item.returned = item.nacked = False
                item.properties.correlation_id = f"{self.nonce}:{seq}"
                channel.basic_publish(
                    item.exchange, item.routing_key, item.body, item.properties, mandatory=True
                )
                batch.pending.add(seq)
                batch.items[seq] = item
                self._confirms[seq] = batch
            if not batch.pending:
                resume([])
                return
            batch.resume = resume

        return Await(channel, start)

    def _on_return(self, _channel: Any, _method: Any, properties: Any, _body: bytes) -> None:
        corr = getattr(properties, "correlation_id", None) or ""
        nonce, _, seq_text = corr.partition(":")
        if nonce != self.nonce or not seq_text.isdigit():
            return
        batch = self._confirms.get(int(seq_text))
        if batch is not None:
            batch.items[int(seq_text)].returned = True

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        nack = isinstance(method, pika.spec.Basic.Nack)
        tag = method.delivery_tag
        seqs: list[int] = []
        if method.multiple:  # every outstanding seq up to tag; the dict is in seq order
            for seq in self._confirms:
                if seq > tag:
                    break
                seqs.append(seq)
        else:
            seqs.append(tag)
        for seq in seqs:
            batch = self._confirms.pop(seq, None)
            if batch is None:
                continue
            if nack:
                batch.items[seq].nacked = True
            batch.pending.discard(seq)
            if not batch.pending and batch.resume is not None:
                resume, batch.resume = batch.resume, None
                resume(list(batch.items.values()))

    def token(self, delivery_tag: int) -> str:
        """The fencing token of a delivery on the current work channel."""
        return f"{self.nonce}:{self.generation}:{delivery_tag}"

    def owns(self, token: str) -> int | None:
        """The delivery tag if ``token`` belongs to the current work channel, else None."""
        nonce, _, rest = token.partition(":")
        generation, _, tag = rest.partition(":")
        if nonce != self.nonce or generation != str(self.generation) or not tag.isdigit():
            return None
        return int(tag)
