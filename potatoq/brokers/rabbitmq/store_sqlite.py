"""The limit store on a SQLite result backend: the statements of ``sql/sqlite.sql`` (tables
``potatoq_rmq_*`` in the backend's file, migration 0007), each transition in one
``BEGIN IMMEDIATE`` transaction of the backend's connection of this thread; times by the
host's clock (the backend's, which every process of a SQLite file shares)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from potatoq.brokers import sqlfiles

from .store_sql import Query, SQLStore

__all__ = ["SQLiteStore"]

T = TypeVar("T")
_END = re.compile(r";\s*$", re.MULTILINE)


@functools.cache
def _blocks() -> dict[str, tuple[str, ...]]:
    """Each block's statements, in order (a block may hold several, one per ``;`` line end)."""
    found = {}
    for name, body in sqlfiles.load_file(__package__, "sql/sqlite.sql").items():
        text = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--"))
        found[name] = tuple(part.strip() for part in _END.split(text) if part.strip())
    return found


def _bound(value: Any) -> Any:
    """A list parameter as the JSON array the statements read with json_each()."""
    return json.dumps(value) if isinstance(value, list) else value


class SQLiteStore(SQLStore):
    """Slots, tokens and unique keys in the SQLite result backend's file."""

    def _now(self) -> int:
        return int(self.backend.clock() * 1000)

    def _atomic(self, work: Callable[[Query], T], *, single: bool = False) -> T:
        blocks = _blocks()
        # rings=(): these writes free no task of the backend's own queues to wake for
        with self.backend._write(rings=()) as conn:

            def query(name: str, **params: Any) -> list[tuple[Any, ...]]:
                bound = {key: _bound(value) for key, value in params.items()}
                rows: list[tuple[Any, ...]] = []
                for statement in blocks[name]:
                    rows = conn.execute(statement, bound).fetchall()
                return rows

            return work(query)
