"""Typed ``broker_transport_options`` of the RabbitMQ broker (read once, validated)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from potatoq.exceptions import ImproperlyConfigured

_PREFIX = re.compile(r"^[A-Za-z0-9_:\-]*$")

#: Default priority bands: 0-2 → band 0, 3-5 → band 3, 6-8 → band 6, 9 and up → band 9
#: (negative priorities share the lowest band). Each band is one quorum queue.
DEFAULT_BANDS = (0, 3, 6, 9)


@dataclasses.dataclass(frozen=True, slots=True)
class RabbitMQOptions:
    """What ``broker_transport_options`` may set for ``amqp://`` and ``amqps://`` URLs.

    * ``queue_prefix``: prepended to every queue potatoq declares (not to the shared delay
      cascade), so that several apps or test runs can share a vhost. No dots.
    * ``priority_bands``: the lowest priority of each band, one quorum queue per band.
      ``[0]`` turns priorities off (one queue per potatoq queue).
    * ``consumer_timeout``: seconds RabbitMQ lets a delivery stay unacknowledged before it
      closes the channel; default ``task_time_limit + 300``. Set as the queue argument
      ``x-consumer-timeout`` (honoured by RabbitMQ 4 quorum queues, checked about once a
      minute).
    * ``heartbeat``: AMQP heartbeat in seconds; default: the server's (60 s).
    * ``ssl``: for ``amqps://``: ``{"cafile": …, "certfile": …, "keyfile": …}``.
    * ``prefetch_hold``: with a prefetch above 1 (``worker_prefetch_multiplier``), seconds
      a prefetched delivery may wait in a process whose threads are all busy before it is
      given back (re-published at the tail of its queue, uncounted); default 1.
    * ``limit_lease``: seconds a concurrency-limit slot stays held without renewal (its
      holder renews it every third of that); a killed worker's slot comes back within it;
      default 20.
    * ``unique_backstop``: seconds a unique key without ``unique_for`` is held at most, for
      a task that RabbitMQ dead-letters itself (see :mod:`.unique`); default 86400.
    """

    queue_prefix: str = ""
    priority_bands: tuple[int, ...] = DEFAULT_BANDS
    consumer_timeout: float | None = None
    heartbeat: int | None = None
    ssl: Mapping[str, str] = dataclasses.field(default_factory=dict)
    prefetch_hold: float = 1.0
    limit_lease: float = 20.0
    unique_backstop: float = 86400.0

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> RabbitMQOptions:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ImproperlyConfigured(
                f"unknown RabbitMQ transport option(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(known))}"
            )
        prefix = options.get("queue_prefix", "")
        if not isinstance(prefix, str) or not _PREFIX.match(prefix) or len(prefix) > 40:
            raise ImproperlyConfigured(
                f"transport option queue_prefix={prefix!r} must be up to 40 letters, digits, '_', '-' or ':'"
            )
        bands_raw = options.get("priority_bands", DEFAULT_BANDS)
        try:
            bands = tuple(sorted({int(b) for b in bands_raw}))
        except (TypeError, ValueError):
            raise ImproperlyConfigured(
                f"transport option priority_bands={bands_raw!r} must be a list of integers"
            ) from None
        if not bands or len(bands) > 10:
            raise ImproperlyConfigured("transport option priority_bands needs 1 to 10 integers")
        timeout = options.get("consumer_timeout")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise ImproperlyConfigured(f"transport option consumer_timeout={timeout!r} must be > 0 seconds")
        heartbeat = options.get("heartbeat")
        if heartbeat is not None and (not isinstance(heartbeat, int) or heartbeat < 0):
            raise ImproperlyConfigured(f"transport option heartbeat={heartbeat!r} must be an int >= 0")
        hold = options.get("prefetch_hold", 1.0)
        if isinstance(hold, bool) or not isinstance(hold, int | float) or hold <= 0:
            raise ImproperlyConfigured(f"transport option prefetch_hold={hold!r} must be > 0 seconds")
        lease = _seconds(options, "limit_lease", 20.0)
        backstop = _seconds(options, "unique_backstop", 86400.0)
        ssl = options.get("ssl") or {}
        if not isinstance(ssl, Mapping) or set(ssl) - {"cafile", "certfile", "keyfile"}:
            raise ImproperlyConfigured("transport option ssl takes only cafile, certfile and keyfile")
        return cls(
            queue_prefix=prefix,
            priority_bands=bands,
            consumer_timeout=None if timeout is None else float(timeout),
            heartbeat=heartbeat,
            ssl=dict(ssl),
            prefetch_hold=float(hold),
            limit_lease=lease,
            unique_backstop=backstop,
        )


def _seconds(options: Mapping[str, Any], name: str, default: float) -> float:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ImproperlyConfigured(f"transport option {name}={value!r} must be > 0 seconds")
    return float(value)
