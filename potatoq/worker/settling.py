"""Settling a delivery so that finished work is never silently dropped.

A settle that fails because the broker can't be reached is kept and retried with a capped
exponential backoff until the broker answers: it either applies the outcome or refuses it
as stale (the claim was lost meanwhile and the task delivered again; that refusal is logged).
Re-running finished work because a broker restarted for a second would break the promise
that a task leaves the broker only once it is done.

Any other exception from ``settle`` is a bug or an outcome the broker can't store (say, a
result it can't encode); retrying would loop forever, so the task is dead-lettered with the
error as the reason instead, keeping its payload for ``retry_dead``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from potatoq.brokers.base import Broker, DeadLetter, Delivery, Outcome
from potatoq.exceptions import OperationalError

__all__ = [
    "UNREACHABLE",
    "Backoff",
    "attempt_settle",
    "connection_errors",
    "describe",
    "log_stale",
    "settle_reliably",
]

logger = logging.getLogger("potatoq.worker.settle")

#: Errors that mean "the broker is unreachable right now", worth retrying (each broker
#: adds its client library's own in ``Broker.connection_errors``).
UNREACHABLE: tuple[type[BaseException], ...] = (OperationalError, ConnectionError, OSError)


def connection_errors(broker: Broker) -> tuple[type[BaseException], ...]:
    """The exceptions that mean ``broker`` can't be reached right now."""
    return UNREACHABLE + tuple(getattr(broker, "connection_errors", ()))


class Backoff:
    """Delays of 0.1 s doubling to ``cap``, with jitter-free steps (one caller, no herd)."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first = first
        self.cap = cap
        self.next = first

    def __call__(self) -> float:
        delay, self.next = self.next, min(self.next * 2, self.cap)
        return delay

    def reset(self) -> None:
        self.next = self.first


def describe(delivery: Delivery) -> str:
    """``task.name[id]`` for log lines."""
    name = delivery.message.task if delivery.message is not None else "<undecodable>"
    return f"{name}[{delivery.id}]"


def attempt_settle(broker: Broker, delivery: Delivery, outcome: Outcome) -> tuple[bool | None, Outcome]:
    """One settle attempt: ``(applied, outcome)``; ``applied`` is None when the broker was
    unreachable (try again later with the returned outcome). A settle that fails for any
    other reason is turned into a dead letter naming the error, and that is tried instead."""
    for _ in range(2):
        try:
            applied = broker.settle(delivery, outcome)
        except connection_errors(broker) as exc:
            logger.debug("settling %s: broker unreachable: %r", describe(delivery), exc)
            return None, outcome
        except Exception as exc:
            if isinstance(outcome, DeadLetter) and outcome.result is None:
                logger.exception("could not dead-letter %s: %r", describe(delivery), exc)
                return False, outcome
            logger.exception("settling %s failed: %r; dead-lettering it instead", describe(delivery), exc)
            outcome = DeadLetter(reason=f"settle failed: {type(exc).__name__}: {exc}"[:500])
            continue
        if not applied:
            log_stale(delivery, outcome)
        return applied, outcome
    return False, outcome


def settle_reliably(
    broker: Broker,
    delivery: Delivery,
    outcome: Outcome,
    *,
    on_retry: Callable[[], None] | None = None,
    stop: threading.Event | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> bool:
    """Settle ``delivery``, retrying while the broker is unreachable; True when applied,
    False when refused as stale (or given up at ``stop``).

    ``on_retry`` runs once, before the first retry (the child uses it to tell the supervisor
    that the task is done running). ``stop``, when set, makes it give up after the current
    attempt; a task given up on stays claimed in the broker until recovery redelivers it,
    so it is late, never lost.
    """
    backoff = Backoff()
    attempts = 0
    while True:
        attempts += 1
        applied, outcome = attempt_settle(broker, delivery, outcome)
        if applied is not None:
            if applied and attempts > 1:
                logger.info("settled %s after %d attempts", describe(delivery), attempts)
            return applied
        if attempts == 1 and on_retry is not None:
            on_retry()
        if stop is not None and stop.is_set():
            logger.error(
                "giving up settling %s (%s): the broker is unreachable and the worker is stopping; "
                "recovery will redeliver it",
                describe(delivery),
                type(outcome).__name__,
            )
            return False
        delay = backoff()
        if attempts == 1:  # once; "settled ... after N attempts" follows when it works
            logger.warning(
                "settling %s failed: the broker is unreachable; retrying with backoff "
                "(%.1fs doubling to %.0fs)",
                describe(delivery),
                delay,
                backoff.cap,
            )
        else:
            logger.debug("settling %s failed again; retrying in %.1fs", describe(delivery), delay)
        sleep(delay)


def log_stale(delivery: Delivery, outcome: Outcome) -> None:
    logger.warning(
        "settle of %s (%s) refused: the claim was lost (delivery %d is stale; the task was "
        "delivered again elsewhere)",
        describe(delivery),
        type(outcome).__name__,
        delivery.deliveries,
    )
