"""Packing the Redis broker's script arguments: messages, outcomes and result records as the
Lua scripts read them, sent over a connection with hiredis' packer when it is installed."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis.connection import AbstractConnection as Connection

from potatoq.brokers.base import (
    BrokerConfig,
    Complete,
    DeadLetter,
    Delivery,
    Outcome,
    Requeue,
    ResultRecord,
    RetryLater,
    validate_queue_name,
)
from potatoq.message import Message

_pack: Callable[[Any], bytes] | None
try:
    from hiredis import pack_command as _pack
except ImportError:  # redis-py without its C parser still works, a little slower
    _pack = None

ID_PLACEHOLDER = "@@PQ_ID@@"


def _command(conn: Connection, *args: Any) -> Any:
    """One command on ``conn``, retried on a connection error as ``Redis.execute_command``
    does, without its per-call layers: redis-py 8 checks a connection out of the pool,
    records observability metrics and runs deprecation wrappers for every command, about
    45 us of CPU per call here against a ~20 us round trip. A worker pays that on every
    task (one script call each), so the script calls take this path."""
    # hiredis packs our str/bytes/int arguments as they are; redis-py's pack_command
    # first copies them through a generator (it accepts more types).
    packed: Any = [_pack(args)] if _pack is not None else conn.pack_command(*args)

    def send_and_read() -> Any:
        conn.send_packed_command(packed)
        return conn.read_response()  # raises the reply's ResponseError (NOSCRIPT ...)

    return conn.retry.call_with_retry(send_and_read, lambda _: conn.disconnect())


def _command_once(conn: Connection, *args: Any) -> Any:
    """One command on ``conn``, not retried: for a call that isn't safe to run twice, whose
    caller finds out what a failed attempt did before trying again."""
    packed: Any = [_pack(args)] if _pack is not None else conn.pack_command(*args)
    conn.send_packed_command(packed)
    return conn.read_response()


def _blocking_command(conn: Connection, read_timeout: float, *args: Any) -> Any:
    """A blocking command (``BZPOPMIN``) on ``conn``, not retried, its reply awaited for
    ``read_timeout`` seconds instead of the connection's socket timeout: an idle worker may
    block longer than ordinary commands may take to answer."""
    packed: Any = [_pack(args)] if _pack is not None else conn.pack_command(*args)
    conn.send_packed_command(packed)
    return conn.read_response(timeout=read_timeout)  # type: ignore[call-arg]  # the stubs predate it


def _disconnect(conn: Connection) -> None:
    conn.disconnect()


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _message_fields(message: Message) -> list[str | bytes]:
    validate_queue_name(message.queue)
    # Rounded up: the scripts compare against the server clock floored to the millisecond,
    # so a task is never claimed before its eta.
    due = "" if message.eta is None else str(math.ceil(message.eta * 1000))
    return [message.id, message.queue, str(int(message.priority)), due, message.encode()]


def _messages_fields(messages: Sequence[Message]) -> list[str | bytes]:
    fields: list[str | bytes] = [str(len(messages))]
    for message in messages:
        fields.extend(_message_fields(message))
    return fields


class _Packer:
    """Turns outcomes into the ARGV blocks the settle scripts read (see their headers)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.result_ttl = str(_ms(config.result_expires))
        self.dead_max = str(max(1, int(config.dead_letter_max)))
        self.dead_ttl = str(_ms(config.dead_letter_ttl))

    def _result(self, record: ResultRecord | None) -> list[str | bytes]:
        return [b"" if record is None else record.encode(), self.result_ttl]

    def _tail(self, outcome: Complete | DeadLetter) -> list[str | bytes]:
        fields = self._result(outcome.result)
        join = outcome.chord
        if join is None:
            fields += ["", "0", "0", b"", "", "", "", "", b""]
        else:
            fields += [join.group_id, str(join.index), str(join.size), join.value]
            fields += _message_fields(join.callback)
        fields += _messages_fields(outcome.followups)
        return fields

    def settle(self, delivery: Delivery, outcome: Outcome) -> tuple[str, list[str | bytes]]:
        """(script name, its ARGV after the prefix) for settling ``delivery`` with ``outcome``."""
        head: list[str | bytes] = [delivery.id, delivery.token]
        if isinstance(outcome, Complete):
            return "complete", head + self._tail(outcome)
        if isinstance(outcome, DeadLetter):
            return "dead_letter", [*head, outcome.reason, self.dead_max, self.dead_ttl, *self._tail(outcome)]
        if isinstance(outcome, RetryLater):
            message = outcome.message
            fields = _message_fields(message)
            return "retry", head + self._result(outcome.result) + fields[1:]
        if isinstance(outcome, Requeue):
            return "requeue", [*head, "1" if outcome.crashed else "0"]
        raise TypeError(f"unknown outcome {outcome!r:.80}")


_SETTLE_KIND = {"complete": "complete", "dead_letter": "dead", "retry": "retry", "requeue": "requeue"}
_SETTLE_AND_CLAIM = {name: f"settle_and_claim.{kind}" for name, kind in _SETTLE_KIND.items()}


def _worker_lost_template(max_deliveries: int) -> bytes:
    """A FAILURE ResultRecord for a task whose workers kept dying; the script fills in the id."""
    message = f"worker lost while running the task, {max_deliveries} deliveries in a row"
    record = ResultRecord(
        task_id=ID_PLACEHOLDER,
        state="FAILURE",
        result={
            "exc_type": "WorkerLostError",
            "exc_module": "potatoq.exceptions",
            "exc_message": [message],
        },
        date_done=time.time(),
    )
    return record.encode()
