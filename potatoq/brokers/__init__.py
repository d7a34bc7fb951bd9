"""The URL → broker registry: the one place a broker class is chosen.

Imports are lazy so that a missing extra (``potatoq[redis]`` …) only matters when that
broker is used.
"""

from __future__ import annotations

import importlib
from urllib.parse import urlsplit

from ..exceptions import ImproperlyConfigured
from .base import Broker, BrokerConfig

# scheme -> (module, class, extra that installs its client library)
REGISTRY: dict[str, tuple[str, str, str | None]] = {
    "memory": ("potatoq.brokers.memory", "MemoryBroker", None),
    "sqlite": ("potatoq.brokers.sqlite", "SQLiteBroker", None),
    "postgresql": ("potatoq.brokers.postgres", "PostgresBroker", "postgres"),
    "postgres": ("potatoq.brokers.postgres", "PostgresBroker", "postgres"),
    "redis": ("potatoq.brokers.redis", "RedisBroker", "redis"),
    "rediss": ("potatoq.brokers.redis", "RedisBroker", "redis"),
    "valkey": ("potatoq.brokers.redis", "RedisBroker", "redis"),
    "valkeys": ("potatoq.brokers.redis", "RedisBroker", "redis"),
    "unix": ("potatoq.brokers.redis", "RedisBroker", "redis"),
    # Redis Cluster / Valkey cluster (the cluster key layout: potatoq/brokers/redis/cluster.py)
    "redis+cluster": ("potatoq.brokers.redis.cluster", "RedisClusterBroker", "redis"),
    "rediss+cluster": ("potatoq.brokers.redis.cluster", "RedisClusterBroker", "redis"),
    "valkey+cluster": ("potatoq.brokers.redis.cluster", "RedisClusterBroker", "redis"),
    "valkeys+cluster": ("potatoq.brokers.redis.cluster", "RedisClusterBroker", "redis"),
    "amqp": ("potatoq.brokers.rabbitmq", "RabbitMQBroker", "rabbitmq"),
    "amqps": ("potatoq.brokers.rabbitmq", "RabbitMQBroker", "rabbitmq"),
}


def scheme_of(url: str) -> str:
    scheme = urlsplit(url).scheme.lower()
    if scheme.endswith("+cluster"):  # redis+cluster:// is a broker of its own
        return scheme
    if "+" in scheme:  # e.g. "postgresql+psycopg" from SQLAlchemy-style URLs
        scheme = scheme.split("+", 1)[0]
    return scheme


def broker_class(url: str, role: str = "broker") -> type[Broker]:
    """The broker class for ``url``; a clear error for an unknown scheme or missing extra.

    ``role`` names what the URL was given for in that error ("broker", "result backend")."""
    from ..utils import mask_url

    scheme = scheme_of(url)
    entry = REGISTRY.get(scheme)
    if entry is None:
        known = ", ".join(sorted(f"{s}://" for s in REGISTRY))
        raise ImproperlyConfigured(f"unknown {role} URL scheme in {mask_url(url)!r}; use one of {known}")
    from ..urls import check_broker_url

    check_broker_url(url, scheme)  # before the broker (and its client library) sees it
    module_name, class_name, extra = entry
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if extra is None or exc.name == module_name:
            raise
        raise ImproperlyConfigured(
            f"the {scheme}:// broker needs an extra: pip install 'potatoq[{extra}]' ({exc})"
        ) from exc
    cls: type[Broker] = getattr(module, class_name)
    return cls


def create_broker(config: BrokerConfig, role: str = "broker") -> Broker:
    return broker_class(config.url, role)(config)


__all__ = ["REGISTRY", "Broker", "BrokerConfig", "broker_class", "create_broker", "scheme_of"]
