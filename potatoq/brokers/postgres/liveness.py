"""The PostgreSQL broker's liveness calls (heartbeats, the tasks a node holds, recovery of
a dead node's tasks) and its coordination rows (chord joins, periodic fire times). Mixed
into :class:`~potatoq.brokers.postgres.PostgresBroker`."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from potatoq.message import Message
from potatoq.states import FAILURE

from ..base import (
    Broker,
    ChordJoin,
    DeadLetter,
    Delivery,
    RecoverReport,
    ResultRecord,
    WorkerInfo,
    WorkerRef,
    decode_delivery,
)
from . import statements, wakeups
from .clocks import SweepClock
from .options import PostgresOptions


def _failure_payload(exc_type: str, message: str) -> dict[str, Any]:
    return {"exc_type": exc_type, "exc_message": [message], "exc_module": "potatoq.exceptions"}


class PostgresLiveness(Broker):
    """Heartbeat rows, held and orphaned claims, recovery (mixed into :class:`PostgresBroker`)."""

    if TYPE_CHECKING:
        options: PostgresOptions
        _channel_prefix: str
        _sweep: wakeups.PerProcess[SweepClock]

        def _run(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]: ...
        def _delivery(self, row: tuple[Any, ...] | None, worker: WorkerRef) -> Delivery | None: ...
        def _housekeeping(self) -> None: ...

    def heartbeat(self, info: WorkerInfo) -> None:
        self._run("worker_heartbeat", {"node": info.node, "info": info.encode()})

    def workers(self) -> list[WorkerInfo]:
        return [WorkerInfo.decode(bytes(info), last_seen=seen) for info, seen in self._run("workers_list")]

    def forget_worker(self, node: str) -> None:
        self._run("worker_forget", {"node": node})

    def held_by(self, worker: WorkerRef) -> list[Delivery]:
        rows = self._run("job_held_by", {"worker": worker.node, "pid": worker.pid})
        return [d for d in (self._delivery(row, worker) for row in rows) if d is not None]

    def orphaned(self, node: str, live_pids: Sequence[int]) -> list[Delivery]:
        rows = self._run("job_orphaned", {"worker": node, "live": [int(pid) for pid in live_pids]})
        found = (self._delivery(row[:6], WorkerRef(node, row[6])) for row in rows)
        return [d for d in found if d is not None]

    def recover(self, dead_after: float, max_deliveries: int) -> RecoverReport:
        params = {
            "dead_after": float(dead_after),
            "max_deliveries": int(max_deliveries),
            "channel_prefix": self._channel_prefix,
            "notify": self.options.notify,
        }
        rows = self._run("job_recover", params)
        requeued = statements.first_int(rows[0] if rows else None)
        self._run("limit_unpark", {"channel_prefix": params["channel_prefix"], "notify": params["notify"]})
        dead = 0
        for task_id, queue, token, deliveries, payload, node, pid in self._run("job_lost", params):
            delivery = decode_delivery(
                id=task_id,
                queue=queue,
                raw=payload,
                token=token,
                deliveries=deliveries,
                worker=WorkerRef(node or "", pid or 0),
                max_size=self.config.max_message_size,
            )
            reason = (
                f"WorkerLostError: the worker running the task died {deliveries} times "
                f"(last: node {node} pid {pid}); task_max_deliveries is {max_deliveries}"
            )
            message = delivery.message
            record = ResultRecord(
                task_id=task_id,
                state=FAILURE,
                result=_failure_payload("WorkerLostError", reason.split(": ", 1)[1]),
                name=message.task if message else None,
                retries=message.retries if message else 0,
                date_done=time.time(),
            )
            if self.settle(delivery, DeadLetter(reason=reason, result=record)):
                dead += 1
        if self._sweep.get().take():
            self._housekeeping()
        return RecoverReport(requeued=requeued, dead=dead)


class PostgresCoordination(Broker):
    """Chord joins and periodic fire times (mixed into :class:`PostgresBroker`)."""

    if TYPE_CHECKING:

        def _run(self, name: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]: ...
        def _defer(self, held: list[str]) -> None: ...
        def _admit(self, queues: Iterable[str]) -> tuple[list[str], list[str]]: ...
        def _message_params(
            self, messages: Sequence[Message], prefix: str = ""
        ) -> tuple[dict[str, Any], set[str]]: ...
        def _chord_params(
            self, join: ChordJoin | None, *, enqueue_callback: bool
        ) -> tuple[dict[str, Any], list[str]]: ...

    def chord_join(self, join: ChordJoin, *, enqueue_callback: bool = True) -> bool:
        params, held = self._chord_params(join, enqueue_callback=enqueue_callback)
        rows = self._run("chord_join", params)
        complete = bool(rows and rows[0][0])
        if complete:
            self._defer(held)
        return complete

    def chord_parts(self, group_id: str) -> list[bytes]:
        return [bytes(value) for (value,) in self._run("chord_parts", {"chord_id": group_id})]

    def claim_fire_time(self, name: str, fire_time: float, message: Message | None) -> bool:
        params, ready = self._message_params((message,) if message is not None else ())
        inline, held = self._admit(ready)
        rows = self._run(
            "periodic_claim", {**params, "name": name, "fire_time": float(fire_time), "channels": inline}
        )
        claimed = bool(rows and rows[0][0])
        if claimed:
            self._defer(held)
        return claimed

    def last_fire_times(self, names: Sequence[str]) -> dict[str, float]:
        if not names:
            return {}
        rows = self._run("periodic_last", {"names": list(names)})
        return {str(name): float(fire_time) for name, fire_time in rows}
