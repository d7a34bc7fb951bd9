"""huey's SQLite storage with its defaults (results stored; the consumer polls from
0.1 s, backing off by 1.15x to 10 s while idle):
``huey_consumer benchmarks.peers.huey_app.huey -w 2 -k process``."""

from __future__ import annotations

from typing import Any

from huey import SqliteHuey

from .. import record
from . import url

huey = SqliteHuey("bench", filename=url().removeprefix("sqlite:///"))


@huey.task(name="noop")
def noop(i: int) -> None:
    record.done()


@huey.task(name="stamp")
def stamp(sent: float) -> None:
    record.started(sent)


TASKS = {"noop": noop, "stamp": stamp}


def send(task: str, *args: Any) -> None:
    TASKS[task](*args)


send_many = None  # huey enqueues one task per call
