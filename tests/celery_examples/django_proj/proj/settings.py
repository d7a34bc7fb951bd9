"""Settings of the example project, with Celery's settings as Celery's Django example has them.

What differs per test comes from the environment:

* ``EXPROJ_DATABASE``: ``sqlite:////abs/path.sqlite3`` or ``postgresql://host:port/dbname``;
* ``EXPROJ_BROKER``: ``CELERY_BROKER_URL`` (unset: no broker setting at all);
* ``EXPROJ_RESULTS``: ``CELERY_RESULT_BACKEND`` (e.g. ``db+sqlite:///…``);
* ``EXPROJ_PREFIX``: a Redis key prefix (``broker_transport_options``), one per test;
* ``EXPROJ_QUEUE_PREFIX``: a RabbitMQ queue prefix, one per test.
"""

import os
from urllib.parse import urlsplit

SECRET_KEY = "example-project-tests-only"
DEBUG = True
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "orders",
    "billing",
]


def _database(url):
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url[len("sqlite:///") :]}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "USER": parts.username or "",
        "PASSWORD": parts.password or "",
    }


DATABASES = {"default": _database(os.environ["EXPROJ_DATABASE"])}

# Celery settings
if os.environ.get("EXPROJ_BROKER"):
    CELERY_BROKER_URL = os.environ["EXPROJ_BROKER"]
if os.environ.get("EXPROJ_RESULTS"):
    CELERY_RESULT_BACKEND = os.environ["EXPROJ_RESULTS"]
if os.environ.get("EXPROJ_PREFIX"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": os.environ["EXPROJ_PREFIX"]}
if os.environ.get("EXPROJ_QUEUE_PREFIX"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "queue_prefix": os.environ["EXPROJ_QUEUE_PREFIX"],
        "confirm_publish": True,
    }
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
