"""Django system checks (``manage.py check``; the deploy ones with ``check --deploy``).

| id | what |
|---|---|
| potatoq.E001 | the broker URL can't be used (unknown scheme, missing extra, bad SQLite URL) |
| potatoq.W002 | no broker set and the default database can't be one: tasks go to ./potatoq.sqlite3 |
| potatoq.W003 | SQLite broker in another file than the SQLite database: sent on commit, not in it |
| potatoq.W004 | SQLite broker path is relative: a worker started elsewhere uses another file |
| potatoq.W005 | a POTATOQ key that is no potatoq/Celery setting (a typo?) |
| potatoq.E006 | deploy: memory:// broker (each process has its own queue; workers never see tasks) |
| potatoq.W007 | deploy: task_always_eager (tasks run inside the web request) |
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core import checks

from potatoq.exceptions import ImproperlyConfigured

from .. import database_identity
from . import setup

__all__ = ["check_deploy", "check_settings", "register"]


def register() -> None:
    checks.register(check_settings, "potatoq")
    checks.register(check_deploy, "potatoq", deploy=True)


def _explicit_broker() -> str | None:
    from django.conf import settings

    from potatoq.config import Settings

    values, _ = setup.read_settings(settings)
    conf = Settings()
    conf.update_from(values)
    value = conf.broker_url
    return str(value) if value else None


def check_settings(app_configs: Sequence[Any] | None = None, **_: Any) -> list[checks.CheckMessage]:
    from django.conf import settings

    from potatoq.brokers import broker_class, scheme_of
    from potatoq.config import translate
    from potatoq.urls import normalize_url

    found: list[checks.CheckMessage] = []
    app = setup.project_app()
    url = normalize_url(app.conf.broker_url_or_default())  # kombu's spellings (pyamqp://) are fine
    try:
        broker_class(url)
        if scheme_of(url) == "sqlite":
            from potatoq.brokers.sqlite.setup import database_path

            database_path(url)
    except ImproperlyConfigured as exc:
        found.append(checks.Error(str(exc), hint="set POTATOQ['broker_url']", id="potatoq.E001"))
        return found
    database = settings.DATABASES[setup.database_alias()]
    if not app.conf.broker_url and setup.database_url(database) is None:
        found.append(
            checks.Warning(
                f"no broker is set and the {setup.database_alias()!r} database ({database.get('ENGINE')}) "
                f"can't be one, so tasks go to {url} in the working directory",
                hint="set POTATOQ = {'broker_url': ...}: PostgreSQL, a SQLite file, Redis or RabbitMQ",
                id="potatoq.W002",
            )
        )
    derived = setup.database_url(database)
    broker_file, database_file = database_identity(url), database_identity(derived)
    sqlite_pair = bool(broker_file and database_file and broker_file[0] == database_file[0] == "sqlite")
    if sqlite_pair and broker_file != database_file:
        found.append(
            checks.Warning(
                f"the SQLite broker file {broker_file[1]} is not the database {database_file[1]}: "  # type: ignore[index]
                "tasks sent inside transaction.atomic() are sent when it commits instead of "
                "being written in the transaction",
                hint="leave broker_url unset to use the Django database as the broker",
                id="potatoq.W003",
            )
        )
    explicit = _explicit_broker()
    if explicit and scheme_of(explicit) == "sqlite" and not explicit.lower().startswith("sqlite:////"):
        found.append(
            checks.Warning(
                f"the SQLite broker URL {explicit!r} is a relative path: a worker started in another "
                "directory opens another file",
                hint="use an absolute path: 'sqlite:///' + str(BASE_DIR / 'tasks.sqlite3')",
                id="potatoq.W004",
            )
        )
    block = getattr(settings, "POTATOQ", None) or {}
    for key in block:
        if str(key).lower() not in setup.INTEGRATION_KEYS and translate(str(key)) is None:
            found.append(
                checks.Warning(
                    f"POTATOQ[{key!r}] is not a potatoq setting",
                    hint="setting names are Celery's: broker_url, task_default_queue, ...",
                    id="potatoq.W005",
                )
            )
    return found


def check_deploy(app_configs: Sequence[Any] | None = None, **_: Any) -> list[checks.CheckMessage]:
    from potatoq.brokers import scheme_of

    found: list[checks.CheckMessage] = []
    app = setup.project_app()
    if scheme_of(app.conf.broker_url_or_default()) == "memory":
        found.append(
            checks.Error(
                "the broker is memory://: each process has its own queue, so workers never see "
                "the tasks your web processes send",
                hint="use PostgreSQL, a SQLite file, Redis or RabbitMQ in production",
                id="potatoq.E006",
            )
        )
    if app.conf.task_always_eager:
        found.append(
            checks.Warning(
                "task_always_eager is on: tasks run inside the caller (the web request), not in workers",
                id="potatoq.W007",
            )
        )
    return found
