"""The Redis broker's concurrency-limit calls: run-time overrides and usage. The slot is
taken in the claim script and given back by whatever ends the run (``lua/_lib.lua``:
``take_slot``, ``free_slot``); waiting tasks sit in their key's parked set meanwhile."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..base import Broker
from ..limits import LimitUsage, validate_limit


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
