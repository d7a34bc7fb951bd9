"""Django integration: add ``"potatoq.contrib.django"`` to ``INSTALLED_APPS``; that is all.

The app is made when Django starts (see :mod:`.apps` and :mod:`.setup`): settings from
``POTATOQ = {...}`` or the project's ``CELERY_*`` settings, the default database as the
broker unless one is set, every installed app's ``tasks.py`` imported, ``TIME_ZONE`` as the
timezone, and ``.delay()`` inside ``transaction.atomic()`` following the transaction
(:mod:`.transaction`). ``manage.py potatoq worker`` runs a worker (:mod:`.management`).

The worker can also be started without ``manage.py``, with ``DJANGO_SETTINGS_MODULE`` set::

    potatoq -A potatoq.contrib.django worker
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from potatoq.app import Potatoq

__all__ = ["get_app"]


def get_app() -> Potatoq:
    """The project's potatoq app (sets Django up first when a plain script asks for it)."""
    from . import setup

    return setup.project_app()


def __getattr__(name: str) -> Any:
    # ``potatoq -A potatoq.contrib.django`` looks for a module attribute named ``app``.
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
