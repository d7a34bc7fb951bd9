"""``benchmarks.scale`` on RabbitMQ 4: a backlog of ready tasks in a quorum queue and far-future
ones in the delay cascade, and what each waiting message costs the node.

The backlog goes in through ``enqueue`` itself, 10,000 messages per call (one batch of
publishes, confirmed together): ready tasks into the ``backlog`` quorum queue, delayed ones
(a year ahead) into the cascade, where they all wait in level 24 (2^24 s). The cascade is
shared by every potatoq queue of the vhost, so delayed tasks are only filled when that
level is empty first (a node of its own, ``--rabbitmq-url``), and purged at the end.

Results can't live in RabbitMQ: they go to the result backend, a Redis broker at
``--redis-url``, so there is no stored-results backlog here.

Per waiting task: the queue processes' memory (``rabbitmqctl list_queues memory``; a
quorum queue keeps an index entry per message in memory and the bodies on disk) and the
growth of the node's data directory (the quorum queues' write-ahead log and segments), both
as deltas over the fill. ``rabbitmqctl`` is run as ``--rabbitmq-ctl`` (by default the
node these scripts start on the URL's port: ``scripts/services/rabbitmq4.sh ctl``); without
it the memory figures are left out.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from benchmarks.scale_target import Target, message
from potatoq.brokers import create_broker
from potatoq.brokers.base import Broker, BrokerConfig
from potatoq.brokers.rabbitmq import delay

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 10_000  # messages per enqueue call
FAR = 3e7  # seconds ahead for a delayed task: its highest bit is 24
LEVEL = delay.level_name(int(FAR).bit_length() - 1)
# Where scripts/services/rabbitmq4.sh keeps a node's files (ROOTFS in scripts/services/lib.sh).
DATA_DIR = "/var/cache/potatoq-services/trixie-rootfs/var/lib/potatoq/rabbitmq-{port}/mnesia"


class Node:
    """``rabbitmqctl`` and the data directory of the node behind the URL, where reachable."""

    def __init__(self, url: str, ctl: str) -> None:
        port = urlparse(url).port or 5672
        self.ctl = shlex.split(ctl)
        self.env = {**os.environ, "POTATOQ_RABBITMQ4_PORT": str(port)}
        data = Path(DATA_DIR.format(port=port))
        self.data = data if data.is_dir() else None

    def queues(self) -> dict[str, tuple[int, int]] | None:
        """name -> (messages, memory bytes), or None without rabbitmqctl."""
        try:
            out = subprocess.run(
                [*self.ctl, "-q", "list_queues", "name", "messages", "memory", "--no-table-headers"],
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
                env=self.env,
                cwd=ROOT,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        rows = {}
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                rows[parts[0]] = (int(parts[1]), int(parts[2]))
        return rows

    def disk(self) -> int | None:
        if self.data is None:
            return None
        total = 0
        for dirpath, _dirs, files in os.walk(self.data):
            for name in files:
                with contextlib.suppress(OSError):  # a segment file rotated away meanwhile
                    total += os.lstat(os.path.join(dirpath, name)).st_size
        return total


def _mine(queues: dict[str, tuple[int, int]], prefix: str) -> tuple[int, int]:
    """(messages, memory) of this run's queues and of the cascade level it fills."""
    rows = [v for k, v in queues.items() if k.startswith(prefix) or k == LEVEL]
    return sum(m for m, _ in rows), sum(b for _, b in rows)


def _wait_counted(node: Node, prefix: str, messages: int) -> dict[str, tuple[int, int]] | None:
    """The queue table once RabbitMQ's counts show ``messages`` (they lag the confirms)."""
    deadline = time.monotonic() + 120
    while True:
        queues = node.queues()
        if queues is None or _mine(queues, prefix)[0] >= messages or time.monotonic() > deadline:
            return queues
        time.sleep(1)


class Filler:
    """Fills the backlog; remembers the running totals for the byte counts."""

    def __init__(self, broker: Broker, node: Node, prefix: str, target: Target) -> None:
        self.broker, self.node, self.prefix, self.target = broker, node, prefix, target
        self.cascade_empty: bool | None = None
        self.waiting = 0
        self.first: tuple[int, int | None] | None = None  # (queue memory, disk) before any fill

    def __call__(self, ready: int, delayed: int, results: int) -> tuple[int, int]:
        del results  # results live in the result backend (Redis), not in RabbitMQ
        before = self.node.queues()
        if self.cascade_empty is None:
            self.cascade_empty = before is not None and before.get(LEVEL, (0, 0))[0] == 0
            if not self.cascade_empty:
                print(f"RabbitMQ: {LEVEL} is not empty (or unknown): no delayed backlog filled")
        if not self.cascade_empty:
            delayed = 0
            self.target.keeps_delayed = False
        if self.first is None:
            self.first = (_mine(before, self.prefix)[1] if before else 0, self.node.disk())
        memory_before = _mine(before, self.prefix)[1] if before else 0
        for count, eta in ((ready, None), (delayed, FAR)):
            for start in range(0, count, CHUNK):
                due = time.time() + eta if eta is not None else None
                self.broker.enqueue([message("backlog", due) for _ in range(min(CHUNK, count - start))])
        self.waiting += ready + delayed
        after = _wait_counted(self.node, self.prefix, self.waiting)
        if after is None:
            return 0, 0
        disk = self.node.disk()
        if disk is not None and self.first[1] is not None:
            self.target.also = [("node data directory growth (bytes)", (disk - self.first[1]) / self.waiting)]
        return _mine(after, self.prefix)[1] - memory_before, 0


def _cleanup(node: Node, prefix: str, url: str, purge_cascade: bool) -> None:
    import pika

    queues = node.queues() or {}
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        for name in queues:
            if name.startswith(prefix):
                channel.queue_delete(name)
        if purge_cascade:
            channel.queue_purge(LEVEL)
    finally:
        connection.close()
    if not queues:
        print(f"RabbitMQ: no rabbitmqctl: delete the queues named {prefix}* by hand")


@contextmanager
def rabbitmq_target(args: argparse.Namespace) -> Iterator[Target]:
    import redis

    from benchmarks.scale_redis import delete_prefix

    prefix = f"pqscale{uuid.uuid4().hex[:6]}-"
    backend_prefix = f"pq-scale-rmq-{prefix}"
    backend = create_broker(
        BrokerConfig(url=args.redis_url, transport_options={"global_keyprefix": backend_prefix})
    )
    # A generous timeout: on a loaded machine a batch of 10,000 confirms can take longer
    # than the default 4 s plus per-message allowance, and enqueue then raises.
    broker = create_broker(
        BrokerConfig(
            url=args.rabbitmq_url,
            transport_options={"queue_prefix": prefix},
            result_backend=backend,
            connection_timeout=120.0,
        )
    )
    node = Node(args.rabbitmq_url, args.rabbitmq_ctl)
    target = Target(
        broker, lambda r, d, s: (0, 0), "queue memory (`rabbitmqctl list_queues memory`)", keeps_results=False
    )
    filler = Filler(broker, node, prefix, target)
    target.fill = filler
    try:
        yield target
    finally:
        broker.close()
        backend.close()
        _cleanup(node, prefix, args.rabbitmq_url, bool(filler.cascade_empty))
        with redis.Redis.from_url(args.redis_url) as client:
            delete_prefix(client, backend_prefix + ":")


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--rabbitmq-ctl",
        default="bash scripts/services/rabbitmq4.sh ctl",
        help="the rabbitmqctl command of the --rabbitmq-url node (run with POTATOQ_RABBITMQ4_PORT set)",
    )
