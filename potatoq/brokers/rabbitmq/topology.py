"""Names and arguments of everything the RabbitMQ broker declares (pure functions, no I/O).

For a potatoq queue ``q`` with ``queue_prefix`` P and priority bands (0, 3, 6, 9)::

    P q          quorum queue, band 0 (priorities below 3, negative ones too)
    P q.p3       quorum queue, band 3 (priorities 3-5)      ... q.p6, q.p9
    P q.dlq      quorum queue, the dead letters of every band of q
    P potatoq.queues     registry: one message per potatoq queue ever declared, so that
                         ``dead list`` and ``queue_stats`` know which queues exist
                         (listing queues needs the management API, which may be off)
    P potatoq.registered.<q>  holds one message once ``q`` is in the registry, so each
                         queue is registered once, not once per process start
    P potatoq.scheduler  single-active-consumer queue holding the periodic-scheduler token
    P potatoq.tomb.<task id>.<deliveries>   tombstone of a delivery whose process the
                         supervisor killed: 1 message (drop it) or 2 (requeue it
                         uncounted); expires after a day

Potatoq queue names contain no dots, so ``q.p3`` / ``q.dlq`` can never collide with
another potatoq queue's band. Every band queue is a quorum queue with

* ``x-delivery-limit = max_deliveries - 1``: RabbitMQ dead-letters a message when it is
  returned with a delivery count above the limit, and the first delivery has count 0, so a
  message that kills its worker every time runs exactly ``max_deliveries`` times;
* ``x-dead-letter-strategy = at-least-once`` into ``q.dlq`` through the default exchange,
  with ``x-overflow = reject-publish``, which at-least-once dead-lettering requires;
* ``x-consumer-timeout``: ``task_time_limit + 5 min`` unless set (see the docs).

Dead-letter queues have ``x-delivery-limit = -1``: listing them reads every message and
hands it back, which counts as a delivery, so they must never drop a message for that.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from potatoq.brokers.base import validate_queue_name

REGISTRY = "potatoq.queues"
REGISTERED = "potatoq.registered"
SCHEDULER = "potatoq.scheduler"
# Named apart from the tombstones of earlier versions ("potatoq.killed.*", one message whose
# body held the action), so a worker of either version never misreads the other's.
KILLED = "potatoq.tomb"
KILLED_TTL_MS = 86_400_000
_PLAIN_ID = re.compile(r"^[A-Za-z0-9_\-]{1,100}$")

#: Headers potatoq writes on dead letters (never copied from an incoming message).
H_REASON = "x-potatoq-reason"
H_DIED_AT = "x-potatoq-died-at"
H_QUEUE = "x-potatoq-queue"
H_DELIVERIES = "x-potatoq-deliveries"
#: Deliveries a message had before a graceful requeue re-published it (see Intake.settle_op).
H_PRIOR = "x-potatoq-prior-deliveries"
#: Marks a message that may be published more than once under one id (a chord callback, a
#: periodic fire): a copy whose id already has a finished result is dropped at claim.
H_ONCE = "x-potatoq-once"


@dataclasses.dataclass(frozen=True, slots=True)
class QueueDecl:
    name: str
    arguments: dict[str, Any]
    durable: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class Topology:
    """Maps potatoq queues to AMQP names and declarations for one broker config."""

    prefix: str
    bands: tuple[int, ...]  # ascending
    max_deliveries: int
    consumer_timeout_ms: int
    dead_letter_max: int
    dead_letter_ttl_ms: int

    # -- names

    def band_of(self, priority: int) -> int:
        """The band (its lowest priority) a message of ``priority`` goes to."""
        chosen = self.bands[0]
        for band in self.bands:
            if priority >= band:
                chosen = band
        return chosen

    def band_queue(self, queue: str, band: int) -> str:
        validate_queue_name(queue, allow_dots=False)
        if band == self.bands[0]:
            return f"{self.prefix}{queue}"
        return f"{self.prefix}{queue}.p{band}"

    def queue_for(self, queue: str, priority: int) -> str:
        return self.band_queue(queue, self.band_of(priority))

    def bands_high_first(self, queue: str) -> list[tuple[int, str]]:
        return [(band, self.band_queue(queue, band)) for band in reversed(self.bands)]

    def dead_queue(self, queue: str) -> str:
        validate_queue_name(queue, allow_dots=False)
        return f"{self.prefix}{queue}.dlq"

    @property
    def registry(self) -> str:
        return f"{self.prefix}{REGISTRY}"

    @property
    def scheduler(self) -> str:
        return f"{self.prefix}{SCHEDULER}"

    def killed(self, task_id: str, deliveries: int) -> str:
        # Task ids are usually UUIDs; anything longer or stranger is hashed to stay a
        # short, plain queue name.
        if _PLAIN_ID.match(task_id):
            return f"{self.prefix}{KILLED}.{task_id}.{deliveries}"
        import hashlib  # only for such ids: hashlib costs every worker process 0.6 MB

        key = hashlib.sha256(task_id.encode()).hexdigest()[:40]
        return f"{self.prefix}{KILLED}.{key}.{deliveries}"

    # -- declarations

    def work_queues(self, queue: str) -> list[QueueDecl]:
        """The dead-letter queue first (band queues dead-letter into it), then the bands."""
        dead = self.dead_queue(queue)
        decls = [
            QueueDecl(
                dead,
                {
                    "x-queue-type": "quorum",
                    "x-delivery-limit": -1,
                    "x-max-length": self.dead_letter_max,
                    "x-overflow": "drop-head",
                    "x-message-ttl": self.dead_letter_ttl_ms,
                },
            )
        ]
        for band in self.bands:
            decls.append(
                QueueDecl(
                    self.band_queue(queue, band),
                    {
                        "x-queue-type": "quorum",
                        "x-delivery-limit": max(0, self.max_deliveries - 1),
                        "x-dead-letter-exchange": "",
                        "x-dead-letter-routing-key": dead,
                        "x-dead-letter-strategy": "at-least-once",
                        "x-overflow": "reject-publish",
                        "x-consumer-timeout": self.consumer_timeout_ms,
                    },
                )
            )
        return decls

    def registry_queue(self) -> QueueDecl:
        return QueueDecl(self.registry, {"x-queue-type": "quorum", "x-delivery-limit": -1})

    def registered_marker(self, queue: str) -> QueueDecl:
        validate_queue_name(queue, allow_dots=False)
        return QueueDecl(
            f"{self.prefix}{REGISTERED}.{queue}",
            {"x-queue-type": "quorum", "x-max-length": 1, "x-overflow": "reject-publish"},
        )

    def scheduler_queue(self) -> QueueDecl:
        # Unlimited deliveries: every failover returns the token, and RabbitMQ 4 would
        # drop it after 20 returns by default.
        return QueueDecl(
            self.scheduler,
            {"x-queue-type": "quorum", "x-single-active-consumer": True, "x-delivery-limit": -1},
        )

    def killed_queue(self, task_id: str, deliveries: int) -> QueueDecl:
        return QueueDecl(self.killed(task_id, deliveries), {"x-expires": KILLED_TTL_MS})


class CheckedNames:
    """``validate_queue_name`` of each queue of a list, remembered per list: a worker asks
    with the same few lists before every task (a claim, a settle and a wait each)."""

    def __init__(self) -> None:
        self._lists: set[tuple[str, ...]] = set()

    def __call__(self, queues: Sequence[str]) -> None:
        key = queues if type(queues) is tuple else tuple(queues)
        try:
            if key in self._lists:
                return
        except TypeError:  # an unhashable "name": refused below
            pass
        for queue in key:
            validate_queue_name(queue, allow_dots=False)
        if len(self._lists) >= 64:  # many callers with different lists: stay small
            self._lists.clear()
        self._lists.add(key)
