"""Settings: Celery's lowercase names, safe defaults, and translation of the old names.

``app.conf`` is a :class:`Settings` mapping that also reads as attributes
(``app.conf.task_default_queue``). Old uppercase Celery 3 names (``CELERY_TASK_SERIALIZER``,
``BROKER_URL``, ``CELERYD_CONCURRENCY`` …) and ``CELERY_`` / ``POTATOQ_`` prefixed names are
translated to the new ones. Settings that only exist to work around Celery's unsafe
defaults (``task_acks_late``, ``worker_prefetch_multiplier``, ``visibility_timeout`` …) are
accepted and ignored, with a debug log line.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from .exceptions import ImproperlyConfigured

logger = logging.getLogger("potatoq.config")

DEFAULT_BROKER_URL = "sqlite:///potatoq.sqlite3"

DEFAULTS: dict[str, Any] = {
    "broker_url": None,  # $POTATOQ_BROKER_URL / $CELERY_BROKER_URL win; None: sqlite:///potatoq.sqlite3
    "broker_transport_options": {},
    "broker_connection_timeout": 4.0,
    "broker_connection_retry": True,
    "broker_connection_retry_on_startup": True,
    "broker_connection_max_retries": 100,
    "result_backend": None,  # None: the broker itself when it is a database
    "result_backend_transport_options": {},
    "result_expires": 86400.0,
    "result_extended": False,
    "result_serializer": "json",
    "task_serializer": "json",
    "accept_content": ["json"],
    "task_default_queue": "default",
    "task_default_priority": 0,
    "task_default_rate_limit": None,
    "task_routes": None,
    "task_queues": None,
    "task_create_missing_queues": True,
    "task_annotations": None,
    # {task name: {"concurrency": N, "concurrency_key": fn, "rate": "10/s", "burst": 5,
    # "rate_key": fn}} (docs/limits.md)
    "task_limits": None,
    "task_queue_limits": None,  # {queue: N}: cluster-wide running tasks of that queue
    "task_time_limit": 1800.0,
    "task_soft_time_limit": None,  # None: a little before the hard limit
    "task_max_retries": 3,
    "task_default_retry_delay": 180.0,
    "task_retry_backoff": 10.0,
    "task_retry_backoff_max": 600.0,
    "task_retry_jitter": True,
    "task_max_deliveries": 5,
    "task_max_message_size": 10 * 1024 * 1024,
    "task_ignore_result": False,
    "task_store_errors_even_if_ignored": False,
    "task_track_started": False,
    "task_always_eager": False,
    "task_eager_propagates": False,
    "task_publish_retry": True,
    "task_publish_retry_policy": None,
    "worker_concurrency": None,  # None: CPUs actually available
    "worker_threads": 1,
    "worker_pool": "prefork",
    "worker_max_tasks_per_child": None,  # None: never recycle (as Celery)
    "worker_max_memory_per_child": None,
    "worker_shutdown_timeout": 25.0,
    "worker_heartbeat_interval": 5.0,
    "worker_dead_after": 60.0,
    "worker_hijack_root_logger": False,
    "worker_log_format": "[%(asctime)s: %(levelname)s/%(processName)s] %(message)s",
    "worker_task_log_format": (
        "[%(asctime)s: %(levelname)s/%(processName)s] %(task_name)s[%(task_id)s]: %(message)s"
    ),
    "worker_disable_rate_limits": False,
    "dead_letter_max": 10000,
    "dead_letter_ttl": 30 * 86400.0,
    "task_history": True,  # task history (docs/history.md)
    "task_history_max_age": 7 * 86400.0,
    "task_history_max_count": 1_000_000,
    "task_history_previews": True,
    "task_history_redact": ("password", "secret", "token", "api_key"),
    "task_history_batch": 128,
    "beat_schedule": {},
    "beat_max_loop_interval": 1.0,
    "timezone": None,
    "enable_utc": True,
    "include": (),
    "imports": (),
}

# Celery settings that work around Celery's own defaults: accepted, ignored, logged at debug.
# Each reads back as Celery's default until set (code may read ``app.conf.task_acks_late``).
IGNORED_DEFAULTS: dict[str, Any] = {
    "task_acks_late": False,
    "task_acks_on_failure_or_timeout": True,
    "task_reject_on_worker_lost": None,
    "worker_prefetch_multiplier": 4,
    "visibility_timeout": None,
    "broker_pool_limit": 10,
    "broker_heartbeat": 120.0,
    "broker_heartbeat_checkrate": 3.0,
    "worker_cancel_long_running_tasks_on_connection_loss": False,
    "worker_enable_prefetch_count_reduction": True,
    "result_persistent": None,
    "task_send_sent_event": False,
    "worker_send_task_events": False,
    "event_queue_expires": 60.0,
    "event_queue_ttl": 5.0,
    "result_accept_content": None,
    "broker_channel_error_retry": False,
    "worker_lost_wait": 10.0,
    "result_chord_join_timeout": 3.0,
    "result_chord_retry_interval": 1.0,
    "broker_login_method": None,
}
IGNORED = frozenset(IGNORED_DEFAULTS)

# Old (Celery 3) uppercase names -> new names; anything else uppercase is lowercased.
OLD_NAMES: dict[str, str] = {
    "BROKER_URL": "broker_url",
    "BROKER_TRANSPORT_OPTIONS": "broker_transport_options",
    "BROKER_CONNECTION_TIMEOUT": "broker_connection_timeout",
    "CELERY_RESULT_BACKEND": "result_backend",
    "CELERY_TASK_RESULT_EXPIRES": "result_expires",
    "CELERY_RESULT_EXPIRES": "result_expires",
    "CELERY_ALWAYS_EAGER": "task_always_eager",
    "CELERY_EAGER_PROPAGATES_EXCEPTIONS": "task_eager_propagates",
    "CELERY_DEFAULT_QUEUE": "task_default_queue",
    "CELERY_ROUTES": "task_routes",
    "CELERY_QUEUES": "task_queues",
    "CELERY_ANNOTATIONS": "task_annotations",
    "CELERY_IGNORE_RESULT": "task_ignore_result",
    "CELERY_TRACK_STARTED": "task_track_started",
    "CELERYD_TASK_TIME_LIMIT": "task_time_limit",
    "CELERYD_TASK_SOFT_TIME_LIMIT": "task_soft_time_limit",
    "CELERYD_CONCURRENCY": "worker_concurrency",
    "CELERYD_MAX_TASKS_PER_CHILD": "worker_max_tasks_per_child",
    "CELERYD_MAX_MEMORY_PER_CHILD": "worker_max_memory_per_child",
    "CELERYD_HIJACK_ROOT_LOGGER": "worker_hijack_root_logger",
    "CELERYD_PREFETCH_MULTIPLIER": "worker_prefetch_multiplier",
    "CELERY_ACKS_LATE": "task_acks_late",
    "CELERYBEAT_SCHEDULE": "beat_schedule",
    "CELERY_TIMEZONE": "timezone",
    "CELERY_ENABLE_UTC": "enable_utc",
    "CELERY_IMPORTS": "imports",
    "CELERY_INCLUDE": "include",
    "CELERY_TASK_SERIALIZER": "task_serializer",
    "CELERY_RESULT_SERIALIZER": "result_serializer",
    "CELERY_ACCEPT_CONTENT": "accept_content",
    "CELERY_DEFAULT_RATE_LIMIT": "task_default_rate_limit",
    "CELERY_DISABLE_RATE_LIMITS": "worker_disable_rate_limits",
    "CELERY_CREATE_MISSING_QUEUES": "task_create_missing_queues",
}

# Lowercase short names that Celery accepts under a namespace prefix (CELERY_BROKER_URL…).
_NEW_NAMES = frozenset(DEFAULTS) | IGNORED


def translate(key: str) -> str | None:
    """The setting name ``key`` stands for, or None when it isn't a setting."""
    if key in _NEW_NAMES:
        return key
    if key in OLD_NAMES:
        return OLD_NAMES[key]
    upper = key.upper()
    if upper in OLD_NAMES:
        return OLD_NAMES[upper]
    lowered = key.lower()
    for prefix in ("celery_", "potatoq_"):
        if lowered.startswith(prefix):
            rest = lowered[len(prefix) :]
            if rest in _NEW_NAMES:
                return rest
            if f"CELERY_{rest.upper()}" in OLD_NAMES:
                return OLD_NAMES[f"CELERY_{rest.upper()}"]
    if lowered in _NEW_NAMES:
        return lowered
    return None


class Settings(MutableMapping[str, Any]):
    """The app's configuration: a mapping with attribute access and Celery-name translation."""

    def __init__(self, initial: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "_data", {**IGNORED_DEFAULTS, **DEFAULTS})
        object.__setattr__(self, "_changed", set())
        object.__setattr__(self, "_pinned", set())
        for name in self._data:
            self._mirror(name)
        if initial:
            self.update(initial)

    def _mirror(self, name: str) -> None:
        """Keep the instance attribute ``name`` equal to the setting, so ``conf.name`` is a
        plain attribute read: through ``__getattr__`` it costs about 1 us (Python first
        raises and catches an AttributeError), and a worker reads several settings per task.
        Names that aren't identifiers, or that a method of this class has, aren't mirrored."""
        if not name.isidentifier() or hasattr(type(self), name):
            return
        if name in self._data:
            self.__dict__[name] = self._data[name]
        else:
            self.__dict__.pop(name, None)

    # -- mapping --------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        data: dict[str, Any] = self._data
        if key in data:  # a current name (or an unknown key stored as given): as translate() would
            return data[key]
        return data[translate(key) or key]

    def __setitem__(self, key: str, value: Any) -> None:
        name = translate(key) or key
        if name == "worker_prefetch_multiplier":
            logger.debug("setting %s=%r: honoured on RabbitMQ, ignored by the other brokers", key, value)
        elif name in IGNORED:
            logger.debug("setting %s=%r is not needed with potatoq and is ignored", key, value)
        self._data[name] = value
        self._changed.add(name)
        self._mirror(name)

    def __delitem__(self, key: str) -> None:
        name = translate(key) or key
        if name in DEFAULTS or name in IGNORED_DEFAULTS:
            self._data[name] = DEFAULTS[name] if name in DEFAULTS else IGNORED_DEFAULTS[name]
        else:
            del self._data[name]
        self._mirror(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    # -- attributes -----------------------------------------------------------------------
    def __getattr__(self, key: str) -> Any:
        data = self.__dict__.get("_data")
        if data is None:  # not initialised yet (copy, unpickling): no settings at all
            raise AttributeError(key)
        # Current names are instance attributes (see _mirror): this is for Celery's names
        # (conf.CELERY_TASK_TIME_LIMIT) and names that couldn't be mirrored.
        try:
            return data[translate(key) or key]
        except KeyError:
            raise AttributeError(f"no setting named {key!r}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def changes(self) -> dict[str, Any]:
        """Settings changed from their defaults."""
        return {k: self._data[k] for k in self._changed}

    def update_from(self, source: Any, namespace: str | None = None) -> None:
        """Copy settings from a module, object or mapping (Celery's ``config_from_object``).

        With ``namespace="CELERY"`` only names starting with ``CELERY_`` are read, and the
        prefix is removed (Django projects: ``CELERY_BROKER_URL`` → ``broker_url``).
        """
        items: Mapping[str, Any]
        if isinstance(source, Mapping):
            items = source
        else:
            items = {k: getattr(source, k) for k in dir(source) if not k.startswith("_")}
        prefix = f"{namespace.rstrip('_')}_" if namespace else None
        for raw_key, value in items.items():
            key = raw_key
            if prefix is not None:
                if not key.upper().startswith(prefix.upper()):
                    continue
                key = key[len(prefix) :]
            name = translate(key)
            if name is None:
                if key.islower() and not callable(value):
                    self[key] = value  # user settings are kept, as in Celery
                continue
            self[name] = value

    def pin(self, key: str, value: Any) -> None:
        """Set ``key`` so that it wins over the environment too (``potatoq -b URL``)."""
        self[key] = value
        self._pinned.add(translate(key) or key)

    def broker_url_or_default(self) -> str:
        """The broker URL in use: ``-b``, then the environment (as in Celery), then the setting.

        A list of URLs (Celery's failover list: the nodes of a RabbitMQ cluster) is returned
        joined by ``;``, Celery's other spelling of it."""
        data = self._data
        if "broker_url" in self._pinned:
            return url_text(data["broker_url"])
        return url_text(env_setting(BROKER_URL_VARIABLES) or data.get("broker_url") or DEFAULT_BROKER_URL)

    def result_backend_or_env(self) -> Any:
        """``result_backend`` in use: ``--result-backend``, the environment (it wins over code,
        as in Celery), then the setting."""
        data = self._data
        if "result_backend" in self._pinned:
            return data["result_backend"]
        return env_setting(RESULT_BACKEND_VARIABLES) or data.get("result_backend")


#: Environment variables that override the code's broker URL and result backend, first one
#: set wins. Celery reads ``CELERY_BROKER_URL`` / ``CELERY_RESULT_BACKEND`` before the app's
#: own settings, so deployments set them in the environment to point code at a server.
BROKER_URL_VARIABLES = ("POTATOQ_BROKER_URL", "CELERY_BROKER_URL")
RESULT_BACKEND_VARIABLES = ("POTATOQ_RESULT_BACKEND", "CELERY_RESULT_BACKEND")


def url_text(value: Any) -> str:
    """``broker_url`` as one string: a list or tuple of URLs (Celery's failover list) is
    joined by ``;``."""
    if isinstance(value, list | tuple):
        if not value or not all(isinstance(url, str) for url in value):
            raise ImproperlyConfigured(f"broker_url={value!r}: a list of broker URLs must hold URL strings")
        return ";".join(value)
    return str(value)


def env_setting(variables: tuple[str, ...]) -> str | None:
    """The first of ``variables`` set (non-empty) in the environment."""
    for name in variables:
        value = os.environ.get(name)
        if value:
            return value
    return None


def load_object(path: str) -> Any:
    """Import ``"pkg.module"`` or ``"pkg.module:attr"`` / ``"pkg.module.attr"``."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        if attr or "." not in path:
            raise
        module_name, _, attr = path.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ImproperlyConfigured(f"can't import {path!r}: {exc}") from exc
    if not attr:
        return module
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImproperlyConfigured(f"module {module_name!r} has no attribute {attr!r}") from None
