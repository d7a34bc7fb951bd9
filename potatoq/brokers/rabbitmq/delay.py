"""The delay cascade: future tasks wait inside RabbitMQ, replicated, with no plugin.

28 levels, ``potatoq.delay.L27`` … ``potatoq.delay.L00``. Level *n* is a topic exchange
and a quorum queue of the same name whose messages expire after 2^n seconds and are then
dead-lettered into the exchange of level *n - 1* (level 0 into ``potatoq.delay.delivery``).
A delay of *d* whole seconds is written in binary into the routing key, most significant
bit (level 27) first, followed by the destination queue::

    delay 5 s to "default"  →  0.0.….0.1.0.1.default   (28 bit words, then the queue)

Exchange L*n* looks only at bit *n*: a ``1`` routes the message into queue L*n* (it waits
2^n s there), a ``0`` passes it straight on to exchange L*n-1*. So the message visits the
queues of exactly the bits that are set, and waits their sum. Each queue holds messages
with one TTL only, so they expire in FIFO order and never block one another. The
delivery exchange binds every potatoq queue with 28 ``*`` words and its name; it has an
alternate exchange so that a message whose queue was deleted lands in
``potatoq.delay.unroutable`` instead of being retried forever by at-least-once
dead-lettering.

A message enters at the level of the delay's highest set bit, skipping empty hops.
Delays are whole seconds (rounded up, so never early) up to 2^28 - 1 s, about 8.5
years. The cascade is shared by every queue prefix on a vhost (it routes on full queue
names), so it is declared once per process and never deleted by potatoq.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

LEVELS = 28
MAX_DELAY = (1 << LEVELS) - 1  # seconds
PREFIX = "potatoq.delay"
DELIVERY = f"{PREFIX}.delivery"
UNROUTABLE = f"{PREFIX}.unroutable"


def level_name(level: int) -> str:
    return f"{PREFIX}.L{level:02d}"


def whole_seconds(delay: float) -> int:
    """The delay the cascade applies: rounded *up* to a whole second, so that a task never
    runs before its eta. A countdown computed just before publishing (3 s minus a few
    microseconds) stays exactly 3 s; only an eta with a fraction arrives up to 1 s late."""
    return max(0, math.ceil(delay - 1e-6))


def routing_key(delay_seconds: int, queue: str) -> str:
    """Bits of ``delay_seconds`` (level 27 first) as words, then the destination queue."""
    if not 0 <= delay_seconds <= MAX_DELAY:
        raise ValueError(
            f"a delay of {delay_seconds} s is beyond the cascade's {MAX_DELAY} s (about 8.5 years)"
        )
    bits = ".".join("1" if delay_seconds >> level & 1 else "0" for level in range(LEVELS - 1, -1, -1))
    return f"{bits}.{queue}"


def entry_exchange(delay_seconds: int) -> str:
    """The exchange a message with this (non-zero) delay is published to."""
    if delay_seconds <= 0:
        raise ValueError("a message due now is published straight to its queue")
    return level_name(delay_seconds.bit_length() - 1)


def delivery_binding(queue: str) -> str:
    """The binding key that routes cascade messages addressed to ``queue`` into it."""
    return "*." * LEVELS + queue


@dataclasses.dataclass(frozen=True, slots=True)
class CascadePlan:
    """Everything to declare, in dependency order."""

    exchanges: list[tuple[str, str, dict[str, Any]]]  # name, type, arguments
    queues: list[tuple[str, dict[str, Any]]]
    queue_bindings: list[tuple[str, str, str]]  # queue, exchange, key
    exchange_bindings: list[tuple[str, str, str]]  # destination, source, key


def plan() -> CascadePlan:
    exchanges: list[tuple[str, str, dict[str, Any]]] = [
        (UNROUTABLE, "fanout", {}),
        (DELIVERY, "topic", {"alternate-exchange": UNROUTABLE}),
    ]
    queues: list[tuple[str, dict[str, Any]]] = [
        (
            UNROUTABLE,
            {
                "x-queue-type": "quorum",
                "x-message-ttl": 30 * 86_400_000,
                "x-max-length": 100_000,
                "x-overflow": "drop-head",
            },
        )
    ]
    queue_bindings = [(UNROUTABLE, UNROUTABLE, "")]
    exchange_bindings: list[tuple[str, str, str]] = []
    for level in range(LEVELS):
        name = level_name(level)
        below = DELIVERY if level == 0 else level_name(level - 1)
        skip = "*." * (LEVELS - 1 - level)
        exchanges.append((name, "topic", {}))
        queues.append(
            (
                name,
                {
                    "x-queue-type": "quorum",
                    "x-message-ttl": (1 << level) * 1000,
                    "x-dead-letter-exchange": below,
                    "x-dead-letter-strategy": "at-least-once",
                    "x-overflow": "reject-publish",
                },
            )
        )
        queue_bindings.append((name, name, f"{skip}1.#"))
        exchange_bindings.append((below, name, f"{skip}0.#"))
    return CascadePlan(exchanges, queues, queue_bindings, exchange_bindings)
