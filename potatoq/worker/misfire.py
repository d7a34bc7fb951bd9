"""What the periodic scheduler does with fire times it missed (``beat_schedule`` entries'
``misfire``, ``misfire_grace`` and ``catch_up_limit`` keys).

A fire time is *missed* when it was due more than ``misfire_grace`` seconds ago and nobody
sent it: no scheduler ran (every worker was down, a deploy) or the one running stalled.
The newest due fire time, when it is within the grace, is on time and always sent. For
the missed ones the entry's policy decides:

* ``run_once`` (the default, what Celery beat does): one run now for all of them, as the
  newest due fire time.
* ``skip``: none; the entry next runs at its next fire time.
* ``catch_up``: one run per missed fire time, the newest ``catch_up_limit`` of them.

Which fire times were missed across a restart is judged from the last fire time recorded
in the broker (``Broker.last_fire_times``), so it works whichever worker starts first; and
every run goes through ``claim_fire_time``, so any number of schedulers send each once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_CATCH_UP_LIMIT", "DEFAULT_GRACE", "POLICIES", "Misfire", "parse_misfire"]

POLICIES = ("run_once", "skip", "catch_up")
DEFAULT_GRACE = 60.0  # seconds late a fire time may be sent and still count as on time
DEFAULT_CATCH_UP_LIMIT = 10


@dataclasses.dataclass(frozen=True)
class Misfire:
    policy: str = "run_once"
    grace: float = DEFAULT_GRACE
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT

    @property
    def keeps(self) -> int:
        """How many of the newest due fire times the scheduler must remember to decide."""
        return self.catch_up_limit if self.policy == "catch_up" else 1

    def to_send(self, due: Sequence[float], now: float) -> list[float]:
        """Of ``due`` (the newest due fire times, oldest first, at most :attr:`keeps`), the
        ones to send now, oldest first."""
        if not due:
            return []
        newest = due[-1]
        if self.policy == "catch_up":
            return list(due[-self.catch_up_limit :])
        if self.policy == "skip" and now - newest > self.grace:
            return []
        return [newest]


def parse_misfire(name: str, spec: Mapping[str, Any]) -> Misfire:
    """The misfire keys of ``beat_schedule[name]``; a clear error naming a bad one."""
    where = f"beat_schedule[{name!r}]"
    policy = spec.get("misfire", "run_once")
    if policy not in POLICIES:
        raise ValueError(f"{where}['misfire'] must be one of {', '.join(POLICIES)}; got {policy!r:.60}")
    grace = spec.get("misfire_grace", DEFAULT_GRACE)
    if (
        isinstance(grace, bool)
        or not isinstance(grace, (int, float))
        or not math.isfinite(grace)
        or grace < 0
    ):
        raise ValueError(f"{where}['misfire_grace'] must be a number of seconds >= 0; got {grace!r:.60}")
    limit = spec.get("catch_up_limit", DEFAULT_CATCH_UP_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"{where}['catch_up_limit'] must be a whole number >= 1; got {limit!r:.60}")
    return Misfire(policy=str(policy), grace=float(grace), catch_up_limit=limit)
