"""A process that writes to a SQLite broker until it is killed (``test_sqlite_faults``).

``python -m tests.faults.sqlite_writer enqueue|settle PATH BATCH``: ``enqueue`` writes batches
of BATCH messages to queue ``bulk`` (one transaction each); ``settle`` claims tasks of
``bulk`` and completes each with a result and two follow-ups in queue ``next``. It prints
``started`` once its first write committed, then loops until it runs out of work or is
SIGKILLed.
"""

from __future__ import annotations

import sys
import time
import uuid

from potatoq.brokers.base import BrokerConfig, Complete, ResultRecord, WorkerRef
from potatoq.brokers.sqlite import SQLiteBroker
from potatoq.message import Message


def main(mode: str, path: str, batch: int) -> int:
    broker = SQLiteBroker(BrokerConfig(url=f"sqlite:///{path}"))
    signalled = False
    worker = WorkerRef(f"writer-{uuid.uuid4().hex[:6]}", 0)
    while True:
        if mode == "enqueue":
            broker.enqueue(
                [
                    Message(id=str(uuid.uuid4()), task="faults.add", args=(i, "x" * 200), queue="bulk")
                    for i in range(batch)
                ]
            )
        else:
            delivery = broker.claim(["bulk"], worker)
            if delivery is None:
                return 0
            record = ResultRecord(task_id=delivery.id, state="SUCCESS", result=1, date_done=time.time())
            followups = tuple(
                Message(id=f"{delivery.id}-{s}", task="faults.add", args=(1, 2), queue="next") for s in "ab"
            )
            broker.settle(delivery, Complete(result=record, followups=followups))
        if not signalled:
            print("started", flush=True)
            signalled = True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
