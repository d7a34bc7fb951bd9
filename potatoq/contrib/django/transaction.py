"""``.delay()`` inside ``transaction.atomic()``: the task follows the transaction.

With the broker in the same database (the default when no broker is set), the task row is
written through Django's own connection, inside the open transaction; otherwise the task
is sent from ``transaction.on_commit`` (savepoints included: a task sent inside a
rolled-back savepoint is dropped). Outside ``atomic`` (autocommit) it is sent at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import TransactionHook

if TYPE_CHECKING:
    from potatoq.app import Potatoq

__all__ = ["DjangoTransaction", "install"]


class DjangoTransaction:
    """The open ``atomic`` block of one database alias (see :class:`~potatoq.contrib.OpenTransaction`)."""

    def __init__(self, alias: str) -> None:
        from django.db import connections

        self.alias = alias
        self.connection = connections[alias]

    @property
    def database_url(self) -> str | None:
        from .setup import database_url

        # Read at each call: the test runner points the connection at a test database.
        return database_url(self.connection.settings_dict)

    def dbapi_connection(self) -> Any:
        self.connection.ensure_connection()
        return self.connection.connection

    def on_commit(self, callback: Callable[[], None]) -> None:
        from django.db import transaction

        transaction.on_commit(callback, using=self.alias)


def open_transaction(alias: str) -> DjangoTransaction | None:
    """The ``atomic`` block open on ``alias`` in this thread, or None in autocommit."""
    from django.db import connections

    if not connections[alias].in_atomic_block:
        return None
    return DjangoTransaction(alias)


def install(app: Potatoq, alias: str) -> TransactionHook:
    """Make ``app``'s tasks follow ``atomic`` blocks on database ``alias``."""
    for hook in list(app.publish_hooks):
        if isinstance(hook, TransactionHook) and getattr(hook.find, "potatoq_django", False):
            hook.uninstall()  # configured again (tests, a second django.setup())

    def find() -> DjangoTransaction | None:
        return open_transaction(alias)

    find.potatoq_django = True  # type: ignore[attr-defined]
    return TransactionHook(app, find).install()
