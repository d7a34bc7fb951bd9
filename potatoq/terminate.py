"""Termination requests: ``revoke(task_id, terminate=True, signal=...)`` as broker state.

Celery broadcasts a revoke to every worker; potatoq has no broadcast channel, so a request
to stop a *running* task is a record the workers can read: a result record under a derived
id (``potatoq.terminate:<task id>``) in the broker's own result store, which every broker
has (RabbitMQ's is its result backend, which revoking needs there anyway). It expires with
``result_expires`` like any result, so nothing has to clean it up.

Every worker supervisor reads the requests for the tasks its children run about once a
second (one ``get_result`` per running task) and signals the child that runs a requested
one (see ``worker/supervisor.py``).
"""

from __future__ import annotations

import signal as signals_module
import time
from collections.abc import Iterable

from .brokers.base import Broker, ResultRecord
from .states import REVOKED

__all__ = ["FLAG_PREFIX", "parse_signal", "request_termination", "termination_requests"]

FLAG_PREFIX = "potatoq.terminate:"


def parse_signal(value: object) -> signals_module.Signals:
    """A signal from Celery's spellings: ``None`` (SIGTERM), ``"SIGKILL"``, ``"KILL"``, ``9``."""
    if value is None:
        return signals_module.SIGTERM
    if isinstance(value, signals_module.Signals):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return signals_module.Signals(value)
        except ValueError:
            raise ValueError(f"revoke: signal {value!r} is not a signal number on this system") from None
    if isinstance(value, str):
        name = value.strip().upper()
        if name.isdigit():
            return parse_signal(int(name))
        name = name if name.startswith("SIG") else f"SIG{name}"
        try:
            return signals_module.Signals[name]
        except KeyError:
            raise ValueError(
                f"revoke: unknown signal {value!r} (use a name such as 'SIGTERM' or 'KILL')"
            ) from None
    raise ValueError(f"revoke: signal must be a name or a number, got {value!r:.60}")


def flag_id(task_id: str) -> str:
    return f"{FLAG_PREFIX}{task_id}"


def request_termination(broker: Broker, task_id: str, signum: signals_module.Signals) -> None:
    """Ask the worker running ``task_id`` (now, or if it starts soon) to signal it."""
    broker.store_result(
        ResultRecord(
            task_id=flag_id(task_id),
            state=REVOKED,
            result={"signal": signum.name},
            name="potatoq.terminate",
            date_done=time.time(),
        )
    )


def termination_requests(broker: Broker, task_ids: Iterable[str]) -> dict[str, signals_module.Signals]:
    """The tasks among ``task_ids`` that someone asked to terminate, with the signal to send."""
    found: dict[str, signals_module.Signals] = {}
    for task_id in task_ids:
        record = broker.get_result(flag_id(task_id))
        if record is None or record.state != REVOKED or not isinstance(record.result, dict):
            continue
        try:
            found[task_id] = parse_signal(record.result.get("signal"))
        except ValueError:
            found[task_id] = signals_module.SIGTERM
    return found
