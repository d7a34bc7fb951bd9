"""The Redis / Valkey broker (``redis://``, ``rediss://``, ``valkey://``, ``unix://``)."""

from __future__ import annotations

from .broker import RedisBroker
from .keys import Keys
from .options import RedisOptions, cluster_enabled, redis_url

__all__ = ["Keys", "RedisBroker", "RedisOptions", "cluster_enabled", "redis_url"]
