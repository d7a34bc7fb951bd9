"""The Redis broker's options (``broker_transport_options``) and its start-up checks of the
URL and the server (no Cluster, a warning unless ``maxmemory-policy`` is ``noeviction``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import redis
import redis.exceptions

from potatoq.exceptions import ImproperlyConfigured

log = logging.getLogger("potatoq.brokers.redis")

# ----------------------------------------------------------------------------- options


@dataclasses.dataclass(frozen=True)
class RedisOptions:
    """``broker_transport_options`` understood by the Redis broker."""

    global_keyprefix: str = "potatoq"
    #: Socket read timeout for ordinary commands; blocking waits stay below it.
    socket_timeout: float = 30.0
    health_check_interval: float = 25.0
    #: How long a periodic fire time is remembered (dedup window between schedulers).
    periodic_record_ttl: float = 86400.0

    @classmethod
    def from_transport_options(cls, options: Mapping[str, Any]) -> RedisOptions:
        known = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for name, value in options.items():
            if name not in known:
                # Celery transport options such as visibility_timeout mean nothing here.
                log.debug("ignoring broker_transport_options[%r]: not a Redis broker option", name)
                continue
            if name == "global_keyprefix":
                if not isinstance(value, str) or not value.strip(":"):
                    raise ImproperlyConfigured(
                        f"broker_transport_options['global_keyprefix'] must be a non-empty string, "
                        f"got {value!r:.60}"
                    )
                values[name] = value
            else:
                try:
                    number = float(value)
                except (TypeError, ValueError):
                    number = -1.0
                if number <= 0:
                    raise ImproperlyConfigured(
                        f"broker_transport_options[{name!r}] must be a positive number, got {value!r:.60}"
                    )
                values[name] = number
        return cls(**values)

    @property
    def max_block(self) -> float:
        """The longest single blocking command, kept safely under the socket timeout."""
        return max(0.05, min(20.0, self.socket_timeout * 0.66))


# ----------------------------------------------------------------------------- server checks


def redis_url(url: str) -> str:
    """``url`` as redis-py understands it: ``valkey://`` -> ``redis://``, ``valkeys://`` -> ``rediss://``."""
    scheme, sep, rest = url.partition("://")
    translated = {"valkey": "redis", "valkeys": "rediss"}.get(scheme.lower(), scheme)
    return f"{translated}{sep}{rest}"


def cluster_enabled(info: Mapping[str, Any]) -> bool:
    """True when ``INFO cluster`` output says the server runs in cluster mode."""
    return str(info.get("cluster_enabled", "0")).strip() in {"1", "True", "true", "yes"}


def check_server(client: redis.Redis[bytes]) -> None:
    """Refuse a cluster-mode server (it needs ``redis+cluster://``); warn unless
    ``maxmemory-policy`` is ``noeviction``.

    Reads ``INFO`` rather than ``CONFIG GET`` because managed services often disable CONFIG.
    """
    pipe = client.pipeline(transaction=False)
    pipe.info("cluster")
    pipe.info("memory")
    cluster_info, memory_info = pipe.execute()
    if cluster_enabled(cluster_info):
        raise ImproperlyConfigured(
            "this Redis server runs in Redis Cluster mode: use a redis+cluster://host:port,host:port/ "
            "URL (the cluster key layout, one hash slot per queue), not redis://"
        )
    policy = memory_info.get("maxmemory_policy")
    if policy is not None and str(policy) != "noeviction":
        log.warning(
            "Redis maxmemory-policy is %r: under memory pressure the server will evict keys, "
            "which deletes queued tasks and results. Set maxmemory-policy noeviction.",
            str(policy),
        )
