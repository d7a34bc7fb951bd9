"""The limit store on a PostgreSQL result backend: the statements of ``sql/postgres.sql``
(tables ``potatoq_rmq_*`` in the backend's schema, migration 0009), run on the backend's
connection of this thread; times by the server's clock."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from potatoq.brokers import sqlfiles
from potatoq.exceptions import OperationalError

from .store_sql import Query, SQLStore

__all__ = ["PostgresStore"]

T = TypeVar("T")
#: Tries of a transaction that PostgreSQL rolled back to break a deadlock (the statements
#: lock rows in one order, so this is a backstop, not a path taken).
TRIES = 3


@functools.cache
def _blocks() -> dict[str, str]:
    return sqlfiles.load_file(__package__, "sql/postgres.sql")


def _rendered(schema: str) -> dict[str, str]:
    """The statements for ``schema`` (quoted as an identifier), without their comments:
    those document the file and only lengthen what the server parses."""
    found = {}
    for name, body in _blocks().items():
        text = "\n".join(
            line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("--")
        )
        found[name] = sql.SQL(text).format(schema=sql.Identifier(schema)).as_string(None)
    return found


class PostgresStore(SQLStore):
    """Slots, tokens and unique keys in the PostgreSQL result backend's tables."""

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self._statements: dict[str, str] | None = None

    def _queries(self) -> dict[str, str]:
        if self._statements is None:
            # the backend's schema, installed or brought up to date on first use
            self._statements = _rendered(self.backend.schema)
        return self._statements

    def _atomic(self, work: Callable[[Query], T], *, single: bool = False) -> T:
        statements = self._queries()
        for attempt in range(TRIES):
            with self.backend._connection() as conn:

                def query(name: str, **params: Any) -> list[tuple[Any, ...]]:
                    cur = conn.execute(statements[name], params)
                    return cur.fetchall() if cur.description is not None else []

                try:
                    if single:
                        return work(query)
                    with conn.transaction():
                        return work(query)
                except psycopg.errors.TransactionRollback:
                    if attempt == TRIES - 1:
                        raise
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    raise  # the backend's own handling: a new connection next time
                except psycopg.Error as exc:
                    # Whatever else the server answered (a missing table: the schema was
                    # dropped under us) is the store failing, as a lost connection is: the
                    # lease renewal logs it and tries again, a claim fails as on an outage.
                    raise OperationalError(f"RabbitMQ limit store in PostgreSQL: {exc}") from exc
        raise AssertionError("unreachable")
