"""Framework integrations, and the transaction glue they share.

A task sent while the caller's database transaction is open must follow that transaction:
rolled back, the task never runs; committed, it always runs. Each integration finds the
caller's open transaction (Django's ``atomic`` block, a SQLAlchemy ``Session``) and gives it
to :class:`TransactionHook`, one of the app's :attr:`~potatoq.app.Potatoq.publish_hooks`,
which then either

* writes the task rows through the transaction's own DB-API connection, when the broker
  is that same database and can do so (``capabilities.transactional_enqueue``): the rows
  commit or roll back with the user's, with no window in between where a crash loses them;
* or holds the messages and sends them once the transaction has committed (dropped on
  rollback), for any other broker.

Tasks with ``enqueue_on_commit = False`` are sent at once, unless sent with
``delay_on_commit()`` / ``apply_async_on_commit()``. (On SQLite that can't be done while
the caller's transaction on the broker's own file holds the write lock: a clear error says
so, after the broker's busy timeout.)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlsplit

from ..brokers import scheme_of
from ..context import follow_transaction
from ..exceptions import OperationalError
from ..message import Message

if TYPE_CHECKING:
    from ..app import Potatoq

__all__ = [
    "OpenTransaction",
    "TransactionHook",
    "database_identity",
    "same_database",
    "split_following",
]

_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}


def database_identity(url: str | None) -> tuple[str, ...] | None:
    """What a database URL points at, so two spellings of one database compare equal.

    ``("sqlite", real path)`` for a SQLite file, ``("postgresql", host, port, dbname)`` for
    PostgreSQL (loopback names count as one host), None for anything else (in-memory SQLite,
    Redis …). Driver suffixes (``postgresql+psycopg://``) are ignored.
    """
    if not url:
        return None
    parts = urlsplit(url)
    scheme = parts.scheme.lower().split("+", 1)[0]
    if scheme == "sqlite":
        rest = url.split("://", 1)[1]
        path = rest[1:] if rest.startswith("/") else ""
        path = path.split("?", 1)[0]
        if not path or path == ":memory:" or path.startswith("file:"):
            return None
        return ("sqlite", os.path.realpath(path))
    if scheme in ("postgresql", "postgres"):
        host = (parts.hostname or "").lower()
        if host in _LOOPBACK:
            host = "localhost"
        try:
            port = parts.port or 5432
        except ValueError:
            return None
        dbname = unquote(parts.path.lstrip("/")) or unquote(parts.username or "")
        return ("postgresql", host, str(port), dbname)
    return None


def same_database(a: str | None, b: str | None) -> bool:
    """True when URLs ``a`` and ``b`` name the same database (see :func:`database_identity`)."""
    first = database_identity(a)
    return first is not None and first == database_identity(b)


def split_following(app: Potatoq, messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    """``(follow the transaction, send now)``: by each task's ``enqueue_on_commit``.

    A task not registered in this process (``send_task`` by name) follows the transaction.
    """
    if follow_transaction.get():
        return list(messages), []
    follow: list[Message] = []
    now: list[Message] = []
    for message in messages:
        task = app.tasks.get(message.task)
        (now if task is not None and not task.enqueue_on_commit else follow).append(message)
    return follow, now


class OpenTransaction(Protocol):
    """The caller's open transaction, as an integration sees it."""

    @property
    def database_url(self) -> str | None:
        """A URL naming the transaction's database (None: not one a broker could share)."""

    def dbapi_connection(self) -> Any:
        """The DB-API connection the transaction runs on (psycopg, sqlite3 …)."""

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after the transaction commits; never if it rolls back."""


class TransactionHook:
    """A publish hook that makes tasks follow the transaction ``find()`` returns.

    ``find`` returns the caller's open transaction, or None outside one (the messages are
    then sent at once, as without the hook).
    """

    def __init__(self, app: Potatoq, find: Callable[[], OpenTransaction | None]) -> None:
        self.app = app
        self.find = find

    def install(self) -> TransactionHook:
        if self not in self.app.publish_hooks:
            self.app.publish_hooks.append(self)
        return self

    def uninstall(self) -> None:
        if self in self.app.publish_hooks:
            self.app.publish_hooks.remove(self)

    def writes_through(self, transaction: OpenTransaction) -> bool:
        """True when the broker is the transaction's own database and can write through it."""
        app = self.app
        if not same_database(app.conf.broker_url_or_default(), transaction.database_url):
            return False
        return bool(app.broker.capabilities.transactional_enqueue)

    def __call__(self, messages: Sequence[Message]) -> Sequence[Message]:
        transaction = self.find()
        if transaction is None:
            return messages
        follow, now = split_following(self.app, messages)
        writes_through = self.writes_through(transaction)
        if follow and writes_through:
            self._write_through(transaction, follow)
        elif follow:
            app = self.app
            held = list(follow)
            transaction.on_commit(lambda: app.send_messages(held, use_hooks=False))
        if now and writes_through and scheme_of(self.app.conf.broker_url_or_default()) == "sqlite":
            self._send_beside_sqlite_transaction(now)
            return []
        return now

    def _write_through(self, transaction: OpenTransaction, messages: Sequence[Message]) -> None:
        try:
            self.app.send_messages(messages, connection=transaction.dbapi_connection(), use_hooks=False)
        except OperationalError as exc:
            if "locked" not in str(exc):
                raise
            # The broker opened its own connection to create its tables, and waited for the
            # write lock this thread's transaction holds.
            raise OperationalError(
                "the SQLite broker file is locked by this thread's own open transaction while "
                "the broker creates its tables: create them before the transaction "
                "(`potatoq migrate`, a worker's start, `app.broker.migrate()`, or Django's migrate)"
            ) from exc

    def _send_beside_sqlite_transaction(self, messages: Sequence[Message]) -> None:
        """Send opted-out tasks now, through the broker's own connection to the same file.

        SQLite has one writer per file: if the caller's open transaction has written, the
        broker waits for a lock this very thread holds, until its busy timeout. Say so.
        """
        try:
            self.app.send_messages(messages, use_hooks=False)
        except OperationalError as exc:
            if "locked" not in str(exc):
                raise
            names = ", ".join(sorted({m.task for m in messages}))
            raise OperationalError(
                f"can't send {names} now: the SQLite broker file is locked by this thread's own "
                "open transaction (enqueue_on_commit=False tasks are sent at once, outside it). "
                "Send it with delay_on_commit(), or after the transaction, or use a broker in "
                "another database"
            ) from exc
