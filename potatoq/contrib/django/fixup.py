"""A Django project run by the plain ``potatoq`` command (what Celery's Django fixup does).

Celery sets Django up for any app when ``DJANGO_SETTINGS_MODULE`` is set: that is how
Celery's documented layout works (``proj/celery.py`` with ``app.autodiscover_tasks()``,
started with ``celery -A proj worker``), and how containers start workers without ``-A``.
The ``potatoq`` command calls :func:`fix_project` in the same cases, so that:

* Django is set up (``django.setup()``) before any task runs;
* with ``potatoq.contrib.django`` in ``INSTALLED_APPS`` its app is used, configured exactly
  as ``manage.py potatoq`` configures it (the default database as the broker, ``CELERY_*`` and
  ``POTATOQ`` settings, the django.tasks backend);
* otherwise the project's own app (``-A proj``, or the one ``proj/__init__.py`` made while
  Django read its settings, or a new one from the ``CELERY_*`` settings) is used, and
  ``autodiscover_tasks()`` finds the ``tasks`` module of every installed app;
* Django's connections are handled in workers as in the integration (closed before the
  children fork, recycled around each task);
* a project that names no broker is told, in a warning, which file it falls back to: the
  Django processes that send tasks use it only if they run in the same directory.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from potatoq.config import DEFAULT_BROKER_URL
from potatoq.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from potatoq.app import Potatoq

__all__ = ["fix_project"]

logger = logging.getLogger("potatoq.django")


def fix_project(app: Potatoq | None) -> Potatoq:
    """Set Django up and return the app a worker of this project must use (``app``: the one
    ``-A`` named, if any)."""
    try:
        import django
        from django.apps import apps
    except ImportError:
        raise ImproperlyConfigured(
            "DJANGO_SETTINGS_MODULE is set but Django isn't installed: unset it, or pip install django"
        ) from None
    if not apps.ready:
        try:
            django.setup()
        except ImportError as exc:
            raise ImproperlyConfigured(f"can't set Django up (DJANGO_SETTINGS_MODULE): {exc}") from exc
    from . import setup

    configured = setup.configured_app()
    if configured is not None and (app is None or app is configured):
        return configured  # potatoq.contrib.django is installed: its ready() did everything
    project = app if app is not None else _project_app()
    _wire(project)
    return project


def _project_app() -> Potatoq:
    """The app the project made while Django started (a kept ``proj/celery.py``), else one
    made from the ``CELERY_*`` settings."""
    from django.conf import settings

    from potatoq import app as app_module

    from . import setup

    existing = app_module._current
    if existing is not None:
        return existing
    values, _ = setup.read_settings(settings)
    made = app_module.Potatoq(setup.project_name())
    made.conf.update_from(values)
    return made


def _wire(app: Potatoq) -> None:
    from django.apps import apps
    from django.conf import settings

    from . import setup, worker

    def installed_apps() -> list[str]:
        return [config.name for config in apps.get_app_configs()]

    app.discovery_packages = installed_apps
    worker.install_connection_handling()
    if not app.conf.timezone and getattr(settings, "TIME_ZONE", None):
        app.conf.timezone = settings.TIME_ZONE
    url = app.conf.broker_url_or_default()
    if url == DEFAULT_BROKER_URL:
        database = setup.database_url(settings.DATABASES.get("default", {}))
        logger.warning(
            "this Django project sets no broker: using %s in %s, not the project's database (%s). "
            "Django processes that send tasks use the same file only from the same directory. "
            "Set CELERY_BROKER_URL (or $POTATOQ_BROKER_URL), or add 'potatoq.contrib.django' to "
            "INSTALLED_APPS to use the database",
            url,
            _cwd(),
            database or "not usable as a broker",
        )
    else:
        from potatoq.utils import mask_url

        logger.info("Django project %s: broker %s", setup.project_name(), mask_url(url))


def _cwd() -> str:
    import os

    return os.getcwd()
