"""Django database connections in worker processes (what Celery's Django fixup does).

* Before the supervisor forks, Django's connections are closed, so no child inherits a
  socket its parent also uses.
* Around each task, ``close_old_connections()`` drops connections that are broken or past
  ``CONN_MAX_AGE``, as Django does around each request. Only in worker processes: in a
  test, draining tasks inside a ``TestCase`` transaction must not close its connection.
* The broker tables are created by ``manage.py migrate`` when the broker is a Django
  database (``post_migrate``), so the first ``.delay()`` inside ``atomic`` finds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from potatoq import signals

if TYPE_CHECKING:
    from django.apps import AppConfig

    from potatoq.app import Potatoq

_state: dict[str, Any] = {"in_worker": False}


def _close_all(sender: Any = None, **_: Any) -> None:
    from django.db import connections

    connections.close_all()


def _in_worker_process(sender: Any = None, **_: Any) -> None:
    _state["in_worker"] = True


def _close_old(sender: Any = None, **_: Any) -> None:
    if _state["in_worker"]:
        from django.db import close_old_connections

        close_old_connections()


def _migrate_broker(app: Potatoq, alias: str) -> Any:
    def migrate(sender: Any = None, using: str = "default", **_: Any) -> None:
        from .. import same_database
        from .transaction import DjangoTransaction

        if using == alias and same_database(
            app.conf.broker_url_or_default(), DjangoTransaction(alias).database_url
        ):
            app.broker.migrate()

    return migrate


def install_connection_handling() -> None:
    """Django's connections in workers: closed before forking, recycled around each task."""
    signals.worker_init.connect(_close_all)
    signals.worker_process_init.connect(_in_worker_process)
    signals.task_prerun.connect(_close_old)
    signals.task_postrun.connect(_close_old)


def install(app: Potatoq, alias: str, config: AppConfig) -> None:
    from django.db.models.signals import post_migrate

    install_connection_handling()
    post_migrate.connect(
        _migrate_broker(app, alias), sender=config, dispatch_uid="potatoq.migrate_broker", weak=False
    )
