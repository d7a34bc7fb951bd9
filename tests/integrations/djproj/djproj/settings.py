"""Settings of the test project. The database and broker come from the environment:

* ``DJPROJ_DATABASE``: ``sqlite:////abs/path.sqlite3`` or ``postgresql://host:port/dbname``;
* ``DJPROJ_BROKER``: a broker URL; unset, the database is the broker (the default setup);
* ``DJPROJ_TASKS_BACKEND=1``: Django 6's ``TASKS`` setting points at potatoq's backend;
* ``DJPROJ_SETTINGS``: JSON of extra settings (``"POTATOQ": null`` removes the POTATOQ dict).
"""

import json
import os
from urllib.parse import urlsplit

SECRET_KEY = "djproj-tests-only"
DEBUG = True
USE_TZ = True
TIME_ZONE = "Europe/Paris"
ROOT_URLCONF = "djproj.urls"
ALLOWED_HOSTS = ["*"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "potatoq.contrib.django",
    "shop",
]


def _database(url: str) -> dict:
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


DATABASES = {"default": _database(os.environ["DJPROJ_DATABASE"])}

POTATOQ = {"task_default_queue": "shop", "result_expires": 3600}
if os.environ.get("DJPROJ_BROKER"):
    POTATOQ["broker_url"] = os.environ["DJPROJ_BROKER"]

if os.environ.get("DJPROJ_TASKS_BACKEND"):
    TASKS = {
        "default": {
            "BACKEND": "potatoq.contrib.django.tasks.PotatoqBackend",
            "QUEUES": ["default", "shop", "reports"],
        }
    }

for _name, _value in json.loads(os.environ.get("DJPROJ_SETTINGS") or "{}").items():
    if _value is None:
        globals().pop(_name, None)
    else:
        globals()[_name] = _value
