"""The Redis broker's concurrency- and rate-limit calls: run-time overrides and usage. The
slot is taken in the claim script and given back by whatever ends the run (``lua/_lib.lua``:
``take_slot``, ``free_slot``); waiting tasks sit in their key's parked set meanwhile. A rate
token is taken in the claim script too (``rate_next``, ``take_token``); a task without one
waits in its queue's delayed set until its token is due (``rate_wait``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..base import Broker
from ..limits import LimitUsage, RateUsage, rate_usage_row, validate_limit, validate_rate


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisLimits(Broker):
    """Concurrency limits in the ``limits:*`` keys (mixed into :class:`RedisBroker`)."""

    if TYPE_CHECKING:

        def _run(self, name: str, args: Sequence[str | bytes | int]) -> Any: ...

    def set_limit(self, key: str, limit: int | None) -> None:
        key, limit = validate_limit(key, limit)
        self._run("limit_set", [key, "" if limit is None else limit])

    def limits(self) -> list[LimitUsage]:
        found = []
        for key, limit, running, waiting, overridden in self._run("limit_usage", []):
            text = _text(limit)
            found.append(
                LimitUsage(
                    key=_text(key),
                    limit=int(float(text)) if text else None,
                    running=int(running),
                    waiting=int(waiting),
                    override=bool(int(overridden)),
                )
            )
        return found

    def set_rate(self, key: str, rate: str | float | None, burst: int | None = None) -> None:
        key, per_second, checked = validate_rate(key, rate, burst)
        ms_per_token = "" if per_second is None else repr(1000.0 / per_second)
        self._run("rate_set", [key, ms_per_token, checked])

    def rates(self) -> list[RateUsage]:
        found = []
        for key, ms_per_token, burst, tat, waiting, overridden, now in self._run("rate_usage", []):
            step = _text(ms_per_token)
            per_second = 1000.0 / float(step) if step else None
            count = _text(burst)
            found.append(
                rate_usage_row(
                    (
                        _text(key),
                        per_second,
                        int(float(count)) if count else None,
                        float(_text(tat)) / 1000.0,
                        int(waiting),
                        int(overridden),
                    ),
                    int(now) / 1000.0,
                )
            )
        return found
