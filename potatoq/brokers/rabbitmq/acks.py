"""Acks sent in groups when a process holds more than one delivery (a prefetch above 1).

A thread that finishes a task while another delivery is already buffered for it goes
straight on to that one; with a prefetch above 1 its ack waits here (:meth:`AckGroup.ack`
with ``later``) until the group holds ``prefetch // 2`` acks, and then they go as one
frame. An ack never waits long:

* whoever is about to block on the connection sends the group first (``Baton._poll``
  calls :meth:`AckGroup.flush` before a poll that may wait): the I/O thread, which takes
  the connection within ``baton.LAZY`` (20 ms) once a task runs, or a thread waiting
  for its next push;
* so does every other frame about a delivery (a nack, a settle that publishes, a
  give-back) and closing the link, so acks keep the order they were made in.

One frame for the group: ``basic.ack(multiple=True)`` with the group's highest tag, which
RabbitMQ applies to every unacked delivery of the channel up to it. So it is used only
when no other delivery below that tag is still open here (handed to a task, held for a
rate token or buffered, which :class:`~.consume.Intake` reports); otherwise each tag gets
its own ack, in order. On a quorum queue, each ack frame is a settle command in the
queue's Raft log; one multiple ack settles the group with one. With two bare consumers at
prefetch 4 on this project's 2-core machine, acking in pairs cut RabbitMQ's CPU per
message from 123 to 101 µs (docs/benchmarks.md, "Acks in pairs").

What it costs: a task that has finished is acked up to 20 ms later while the next one
runs. If the process dies or its connection drops in between, RabbitMQ delivers that task
again, as it would after a crash between a task's end and its ack (at least once, either
way). With the default prefetch of 1 nothing is ever buffered, so every ack goes at once.
"""

from __future__ import annotations

from collections.abc import Callable

import pika.channel


class AckGroup:
    """Tags of finished deliveries of the current work channel whose ack waits; used by
    whichever thread drives the connection (see :mod:`.baton`)."""

    def __init__(self, lowest_open: Callable[[], int | None]) -> None:
        #: The lowest tag of the channel still open here besides the group (None: none).
        self._lowest_open = lowest_open
        self._tags: list[int] = []
        self._channel: pika.channel.Channel | None = None

    def ack(self, channel: pika.channel.Channel, tag: int, *, later: bool, group: int) -> None:
        """Ack ``tag`` on ``channel``: now, with the acks waiting, unless ``later`` and
        fewer than ``group`` would go together."""
        if channel is not self._channel:
            self.drop()  # a new channel: the old one's deliveries went back with it
            self._channel = channel
        self._tags.append(tag)
        if not later or len(self._tags) >= group:
            self.flush()

    def flush(self) -> None:
        """Send the acks waiting (driver only)."""
        tags = self._tags
        if not tags:
            return
        self._tags = []
        channel = self._channel
        if channel is None or not channel.is_open:
            return  # RabbitMQ put those deliveries back when the channel closed
        if len(tags) == 1:  # every ack with the default prefetch: nothing else to look at
            channel.basic_ack(tags[0])
            return
        top = max(tags)
        lowest = self._lowest_open()
        if lowest is None or lowest > top:
            channel.basic_ack(top, multiple=True)
            return
        for tag in sorted(tags):
            channel.basic_ack(tag)

    def drop(self) -> None:
        """The work channel is gone: nothing waiting can be acked any more."""
        self._tags = []
        self._channel = None
