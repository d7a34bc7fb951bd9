"""The memory broker's concurrency-limit calls: run-time overrides and usage. The claim
(:meth:`Store.pop_ready`) skips jobs whose key has every slot running."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..base import Broker
from ..limits import LimitUsage, RateUsage, tokens_left, validate_limit, validate_rate
from .store import READY, SCHEDULED, Store


class MemoryLimits(Broker):
    """Concurrency limits on the in-process store (mixed into :class:`MemoryBroker`)."""

    if TYPE_CHECKING:
        _store: Store

    def set_limit(self, key: str, limit: int | None) -> None:
        key, limit = validate_limit(key, limit)
        store = self._store
        with store.lock:
            if limit is None:
                store.limit_overrides.pop(key, None)
            else:
                store.limit_overrides[key] = limit
            store.enqueued.notify_all()  # a raised limit frees slots

    def limits(self) -> list[LimitUsage]:
        store = self._store
        with store.lock:
            keys = {j.limit_key for j in store.jobs.values() if j.limit_key is not None} | set(
                store.limit_overrides
            )
            found = []
            for key in sorted(keys):
                waiting = sum(1 for j in store.jobs.values() if j.state == READY and j.limit_key == key)
                maxes = [j.limit_max for j in store.jobs.values() if j.limit_key == key]
                carried = max(maxes) if maxes else None
                override = store.limit_overrides.get(key)
                found.append(
                    LimitUsage(
                        key=key,
                        limit=override if override is not None else carried,
                        running=store.running_where(key),
                        waiting=waiting,
                        override=override is not None,
                    )
                )
            return found

    def set_rate(self, key: str, rate: str | float | None, burst: int | None = None) -> None:
        key, per_second, checked = validate_rate(key, rate, burst)
        store = self._store
        with store.lock:
            if per_second is None:
                store.rate_overrides.pop(key, None)
            else:
                store.rate_overrides[key] = (per_second, checked)
            store.rates.pop(key, None)  # a new rate starts with a full burst
            for job in store.jobs.values():
                if job.rate_key == key and job.state == SCHEDULED and job.rate_wait:
                    job.rate_wait = False
                    store.make_ready(job)
            store.enqueued.notify_all()

    def rates(self) -> list[RateUsage]:
        store = self._store
        with store.lock:
            now = time.time()
            keys = {j.rate_key for j in store.jobs.values() if j.rate_key is not None}
            keys |= set(store.rate_overrides) | set(store.rates)
            found = []
            for key in sorted(keys):
                jobs = [j for j in store.jobs.values() if j.rate_key == key]
                override = store.rate_overrides.get(key)
                if override is not None:
                    per_second: float | None = override[0]
                    burst: int | None = override[1]
                elif jobs:
                    per_second, burst = 1.0 / jobs[-1].rate_interval, jobs[-1].rate_burst
                else:
                    per_second = burst = None
                tat = store.rates.get(key, [0.0])[0]
                tokens = float(burst or 1)
                if per_second is not None and burst is not None:
                    tokens = tokens_left(tat, now, 1.0 / per_second, burst)
                waiting = sum(1 for j in jobs if j.state in (READY, SCHEDULED))
                if per_second is None and not waiting and tokens >= (burst or 1):
                    continue  # an idle key whose tasks are gone
                found.append(RateUsage(key, per_second, burst, tokens, waiting, override is not None))
            return found
