"""Making the project's app from Django's settings (called from ``AppConfig.ready``).

Where settings come from, later ones winning: the project's ``CELERY_*`` settings (as with
Celery's ``config_from_object("django.conf:settings", namespace="CELERY")``), then the
``POTATOQ = {...}`` dict, whose keys are Celery's setting names. Two keys of that dict are
not settings but choices of this integration:

* ``"database"``: the Django database alias whose transactions tasks follow, and the broker
  when no broker is set (default ``"default"``);
* ``"app"``: ``"proj.celery:app"`` to use an app the project made itself instead of a new one.

An app the project already made (a ``proj/celery.py`` kept from Celery, imported before
Django is set up) is used as it is, rather than making a second one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from potatoq.config import BROKER_URL_VARIABLES, env_setting, load_object
from potatoq.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from django.apps import AppConfig

    from potatoq.app import Potatoq

#: Keys of the ``POTATOQ`` dict that configure the integration, not the app.
INTEGRATION_KEYS = frozenset({"database", "app"})

#: libpq parameters of ``DATABASES[...]["OPTIONS"]`` carried into a derived broker URL.
_LIBPQ_OPTIONS = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "service",
        "passfile",
        "connect_timeout",
        "target_session_attrs",
        "options",
        "keepalives",
        "keepalives_idle",
    }
)

_POSTGRES_ENGINES = ("django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis")
_SQLITE_ENGINES = ("django.db.backends.sqlite3", "django.contrib.gis.db.backends.spatialite")

_app: Potatoq | None = None
_alias = "default"


def project_app() -> Potatoq:
    """The app made by :func:`configure`; sets Django up first if nobody has yet."""
    if _app is None:
        import django
        from django.apps import apps

        if not apps.ready:
            if not os.environ.get("DJANGO_SETTINGS_MODULE"):
                raise ImproperlyConfigured(
                    "potatoq.contrib.django needs Django's settings: set DJANGO_SETTINGS_MODULE "
                    "or use `python manage.py potatoq ...`"
                )
            django.setup()
        if _app is None:
            raise ImproperlyConfigured(
                "add 'potatoq.contrib.django' to INSTALLED_APPS to use the Django integration"
            )
    return _app


def configured_app() -> Potatoq | None:
    """The app :func:`configure` made, or None when the integration isn't installed."""
    return _app


def database_alias() -> str:
    """The Django database alias whose transactions tasks follow."""
    return _alias


def read_settings(settings: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(app settings, integration options)`` from a Django settings object."""
    values: dict[str, Any] = {}
    for name in dir(settings):
        if name.startswith("CELERY_"):
            values[name] = getattr(settings, name)
    options: dict[str, Any] = {}
    block = getattr(settings, "POTATOQ", None)
    if block is not None:
        if not isinstance(block, Mapping):
            raise ImproperlyConfigured(
                f"settings.POTATOQ must be a dict of Celery setting names, not {type(block).__name__}"
            )
        for key, value in block.items():
            if str(key).lower() in INTEGRATION_KEYS:
                options[str(key).lower()] = value
            else:
                values[str(key)] = value
    return values, options


def database_url(settings_dict: Mapping[str, Any]) -> str | None:
    """A broker URL for a Django database (PostgreSQL or a SQLite file), else None."""
    engine = str(settings_dict.get("ENGINE") or "")
    name = settings_dict.get("NAME")
    if engine in _SQLITE_ENGINES:
        text = os.fspath(name) if name else ""
        if not text or text == ":memory:" or text.startswith("file:") or "mode=memory" in text:
            return None
        return "sqlite:///" + os.path.abspath(text)
    if engine in _POSTGRES_ENGINES:
        user = str(settings_dict.get("USER") or "")
        password = str(settings_dict.get("PASSWORD") or "")
        host = str(settings_dict.get("HOST") or "")
        port = str(settings_dict.get("PORT") or "")
        query = {
            key: str(value)
            for key, value in dict(settings_dict.get("OPTIONS") or {}).items()
            if key in _LIBPQ_OPTIONS and isinstance(value, str | int)
        }
        if host.startswith("/"):  # a Unix socket directory
            query["host"] = host
            host = ""
        auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
        netloc = (auth + "@" if auth else "") + host + (":" + port if port and host else "")
        if port and not host:
            query["port"] = port
        url = f"postgresql://{netloc}/{quote(str(name or ''), safe='')}"
        return url + ("?" + urlencode(query) if query else "")
    return None


def project_name() -> str:
    module = os.environ.get("DJANGO_SETTINGS_MODULE") or ""
    return module.split(".", 1)[0] or "django"


def _existing_app(options: Mapping[str, Any]) -> Potatoq | None:
    from potatoq import app as app_module

    spec = options.get("app")
    if spec:
        found = load_object(str(spec)) if isinstance(spec, str) else spec
        if not isinstance(found, app_module.Potatoq):
            raise ImproperlyConfigured(f"POTATOQ['app'] = {spec!r} is not a potatoq app")
        return found
    return app_module._current


def configure(config: AppConfig) -> Potatoq:
    """Make (or adopt) the project's app and wire it into Django."""
    global _app, _alias
    from django.conf import settings

    from potatoq.app import Potatoq

    from . import transaction, worker

    values, options = read_settings(settings)
    alias = str(options.get("database") or "default")
    databases = settings.DATABASES
    if alias not in databases:
        raise ImproperlyConfigured(f"POTATOQ['database'] = {alias!r} is not in settings.DATABASES")
    app = _existing_app(options)
    if app is None:
        app = Potatoq(project_name())
        app.conf.update_from(values)
    if not app.conf.broker_url and not env_setting(BROKER_URL_VARIABLES):
        url = database_url(databases[alias])
        if url is not None:
            app.conf.broker_url = url
            app._reset_connections()
    if not app.conf.timezone and getattr(settings, "TIME_ZONE", None):
        app.conf.timezone = settings.TIME_ZONE
    _app, _alias = app, alias
    transaction.install(app, alias)
    worker.install(app, alias, config)
    # Not this app's own tasks.py: it is the django.tasks backend, importable on Django 6 only.
    app.autodiscover_tasks([c.name for c in config.apps.get_app_configs() if c.name != config.name])
    # A kept proj/celery.py's own app.autodiscover_tasks() (no packages) finds the same apps.
    app.discovery_packages = lambda: [c.name for c in config.apps.get_app_configs() if c.name != config.name]
    if uses_tasks_backend(getattr(settings, "TASKS", None)):
        import_module(f"{config.name}.tasks")  # registers the task that runs Django tasks
    return app


def uses_tasks_backend(tasks_setting: Any) -> bool:
    """True when Django's ``TASKS`` setting names potatoq's backend."""
    if not isinstance(tasks_setting, Mapping):
        return False
    return any(
        isinstance(params, Mapping) and str(params.get("BACKEND", "")).startswith("potatoq.")
        for params in tasks_setting.values()
    )
