"""Procrastinate with its defaults (asyncio worker, concurrency 1, LISTEN/NOTIFY, finished
jobs kept): ``procrastinate --app=benchmarks.peers.procrastinate_app.app worker``, one
process per worker. The schema is applied by the harness (``procrastinate schema
--apply``) into a database of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from procrastinate import App, PsycopgConnector

from .. import record
from . import url

app = App(connector=PsycopgConnector(conninfo=url()))


@app.task(name="noop")
def noop(i: int) -> None:
    record.done()


@app.task(name="stamp")
def stamp(sent: float) -> None:
    record.started(sent)


TASKS = {"noop": noop, "stamp": stamp}
_opened: list[bool] = []


def _open() -> None:
    if not _opened:
        app.open()
        _opened.append(True)


def send(task: str, *args: Any) -> None:
    _open()
    (name,) = {"noop": ("i",), "stamp": ("sent",)}[task]
    TASKS[task].defer(**{name: args[0]})


def send_many(task: str, args_list: Sequence[Sequence[Any]]) -> None:
    """``Task.batch_defer``: one INSERT for the batch."""
    _open()
    (name,) = {"noop": ("i",), "stamp": ("sent",)}[task]
    TASKS[task].batch_defer(*({name: args[0]} for args in args_list))
