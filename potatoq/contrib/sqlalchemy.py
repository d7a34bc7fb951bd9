"""SQLAlchemy: tasks sent while a ``Session`` is in a transaction follow that transaction.

::

    from sqlalchemy.orm import sessionmaker
    from potatoq.contrib.sqlalchemy import follow_transactions

    Session = sessionmaker(engine)
    follow_transactions(app, Session)        # or follow_transactions(app): every Session

    with Session.begin() as session:
        session.add(order)
        charge.delay(order.id)               # sent at COMMIT; never, if this rolls back

When the broker is the session's own database (PostgreSQL through psycopg, or the same
SQLite file), the task row is written through the session's connection inside the
transaction instead: it commits with the data, so a crash right after COMMIT loses nothing.
Savepoints (``session.begin_nested()``) are followed too: a task sent inside a rolled-back
savepoint is dropped.

How the session is found: the Session events ``after_transaction_create`` /
``after_transaction_end`` keep, per thread or asyncio task (a context variable), the
sessions whose transaction is open; ``.delay()`` follows the newest one still open.
"""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

from ..app import Potatoq
from . import TransactionHook

__all__ = ["SessionTransactions", "follow_transactions"]

_PENDING = "potatoq.pending"  # session.info key: [(SessionTransaction, callback), ...]


class OpenSession:
    """A session's open transaction (see :class:`~potatoq.contrib.OpenTransaction`)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @property
    def database_url(self) -> str | None:
        try:
            bind = self.session.get_bind()
        except Exception:  # noqa: BLE001 - several binds and no mapper to choose: not shareable
            return None
        return bind.engine.url.render_as_string(hide_password=False)

    def dbapi_connection(self) -> Any:
        return self.session.connection().connection.dbapi_connection

    def on_commit(self, callback: Callable[[], None]) -> None:
        session = self.session
        current = session.get_nested_transaction() or session.get_transaction()
        session.info.setdefault(_PENDING, []).append((current, callback))


def _within(transaction: SessionTransaction | None, ancestor: SessionTransaction) -> bool:
    while transaction is not None:
        if transaction is ancestor:
            return True
        transaction = transaction.parent
    return False


class SessionTransactions:
    """Follows the transactions of the sessions ``target`` makes, for ``app``'s tasks."""

    def __init__(self, app: Potatoq, target: Any = Session) -> None:
        self.app = app
        self.target = target
        self._open: contextvars.ContextVar[tuple[weakref.ref[Session], ...]] = contextvars.ContextVar(
            f"potatoq_sqlalchemy_{id(self)}", default=()
        )
        self.hook = TransactionHook(app, self.find)

    # -- events ---------------------------------------------------------------------------
    def _created(self, session: Session, transaction: SessionTransaction) -> None:
        if transaction.parent is None:
            self._open.set((*self._forget(session), weakref.ref(session)))

    def _ended(self, session: Session, transaction: SessionTransaction) -> None:
        if transaction.parent is None:
            self._open.set(self._forget(session))
            session.info.pop(_PENDING, None)  # committed ones were sent in _committed

    def _committed(self, session: Session) -> None:
        if session.get_nested_transaction() is not None:
            return  # a savepoint released: its tasks now belong to the enclosing transaction
        pending = session.info.pop(_PENDING, [])
        for _, callback in pending:
            callback()

    def _rolled_back(self, session: Session, previous_transaction: SessionTransaction) -> None:
        pending = session.info.get(_PENDING)
        if pending:
            session.info[_PENDING] = [p for p in pending if not _within(p[0], previous_transaction)]

    def _forget(self, session: Session) -> tuple[weakref.ref[Session], ...]:
        return tuple(ref for ref in self._open.get() if ref() is not None and ref() is not session)

    # -- the publish hook ------------------------------------------------------------------
    def find(self) -> OpenSession | None:
        for ref in reversed(self._open.get()):
            session = ref()
            if session is not None and session.in_transaction():
                return OpenSession(session)
        return None

    def install(self) -> SessionTransactions:
        event.listen(self.target, "after_transaction_create", self._created)
        event.listen(self.target, "after_transaction_end", self._ended)
        event.listen(self.target, "after_commit", self._committed)
        event.listen(self.target, "after_soft_rollback", self._rolled_back)
        self.hook.install()
        return self

    def uninstall(self) -> None:
        self.hook.uninstall()
        event.remove(self.target, "after_transaction_create", self._created)
        event.remove(self.target, "after_transaction_end", self._ended)
        event.remove(self.target, "after_commit", self._committed)
        event.remove(self.target, "after_soft_rollback", self._rolled_back)


def follow_transactions(app: Potatoq, sessions: Any = Session) -> SessionTransactions:
    """Make ``app``'s tasks follow the transactions of ``sessions``.

    ``sessions`` is a ``sessionmaker``, a ``scoped_session``, a ``Session`` subclass, or
    (the default) ``Session`` itself: every session. Call :meth:`SessionTransactions.uninstall`
    to stop.
    """
    return SessionTransactions(app, sessions).install()
