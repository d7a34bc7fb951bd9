"""The limit store's transitions on a SQL result backend, shared by PostgreSQL and SQLite.

Each transition is one atomic unit of named statements (``sql/postgres.sql`` or
``sql/sqlite.sql``, the same names in both): :meth:`SQLStore._atomic` runs a function of
them in one transaction (PostgreSQL: its first statement locks the key's row; SQLite:
``BEGIN IMMEDIATE``), so the decision it takes in Python between two statements stands
until it commits. The semantics are those of the Lua scripts in ``lua/`` (which document
each transition), reply shapes included:

* slots: rows (key, holder, lease expiry); a live holder's process renews its leases and a
  killed one's stop counting once expired, so no slot leaks;
* rates: GCRA on the key's tat (ms), a token reserved for a parked task and honoured when
  it comes back in the same generation (a rate set at run time starts a new one);
* unique keys: a row per key naming its holder, until released or past its TTL.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from potatoq.exceptions import OperationalError

from .store import LimitStore

__all__ = ["Query", "SQLStore"]

T = TypeVar("T")
#: Runs one named statement (block) with keyword parameters; its rows.
Query = Callable[..., list[tuple[Any, ...]]]

#: Seconds between two sweeps of unique keys past their TTL (per process and backend).
SWEEP_EVERY = 30.0
#: Wait entries: a task parked for a concurrency slot, or for a rate token.
SLOT_WAIT, RATE_WAIT = "c", "r"


class SQLStore(LimitStore):
    """The transitions over named statements; subclasses say how a transaction runs."""

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self._swept = 0.0
        self._sweep_lock = threading.Lock()

    def _atomic(self, work: Callable[[Query], T], *, single: bool = False) -> T:
        """``work`` run in one transaction (``single``: it runs one statement, atomic
        by itself). May run it again after a deadlock was broken."""
        raise NotImplementedError

    def _now(self) -> int | None:
        """The time in ms for statements that take it (None: they read the server's)."""
        return None

    # ------------------------------------------------------------------ concurrency slots

    def slot_take(self, key: str, carried: int, holder: str, lease_ms: int, task: str, listed: int) -> int:
        def take(q: Query) -> int:
            row = q("slot_lock", key=key, carried=int(carried), now=self._now())[0]
            limit, now = row[0], int(row[1])
            rows = q(
                "slot_claim",
                key=key,
                holder=holder,
                task=task,
                limit=int(limit),
                now=now,
                until=now + int(lease_ms),
                listed=now + int(listed),
            )
            return 1 if rows and int(rows[0][0]) > 0 else 0

        return self._atomic(take)

    def slot_renew(self, lease_ms: int, *pairs: str) -> int:
        keys, holders = list(pairs[0::2]), list(pairs[1::2])
        self._atomic(
            lambda q: q("slot_renew", keys=keys, holders=holders, lease=int(lease_ms), now=self._now()),
            single=True,
        )
        return 0

    def slot_release(self, key: str, holder: str) -> int:
        self._atomic(lambda q: q("slot_release", key=key, holder=holder), single=True)
        return 0

    def limit_set(self, key: str, limit: int | str) -> int:
        override = None if limit == "" else int(limit)
        self._atomic(lambda q: q("limit_set", key=key, override=override), single=True)
        return 0

    def limit_usage(self) -> list[list[Any]]:
        def usage(q: Query) -> list[list[Any]]:
            locked = q("limit_lock", now=self._now())
            if not locked:  # no key at all
                return []
            rows = q("limit_usage", now=int(locked[0][1]))
            return [
                [key, limit, int(running), int(waiting), int(over)]
                for key, limit, running, waiting, over in rows
            ]

        return self._atomic(usage)

    # ------------------------------------------------------------------ rate tokens

    def rate_set(self, key: str, step: str, burst: int) -> int:
        per = None if step == "" else float(step)
        self._atomic(
            lambda q: q("rate_set", key=key, step=per, burst=None if per is None else int(burst)), single=True
        )
        return 0

    def rate_take(
        self,
        key: str,
        step: str,
        burst: int,
        task: str,
        listed: int,
        due: int | str,
        gen: int | str,
        horizon: int = 1000,
        longest: int = 10_000,
        slack: int = 25,
        looks: int = 10,
    ) -> list[int]:
        def take(q: Query) -> list[int]:
            row = q("rate_lock", key=key, step=float(step), burst=int(burst), now=self._now())[0]
            current, set_step, set_burst, tat, now = int(row[0]), row[1], row[2], float(row[3]), int(row[4])

            def answer(due_ms: int, new_tat: float | None) -> list[int]:
                waits = due_ms > now
                q(
                    "rate_answer",
                    key=key,
                    task=task,
                    tat=new_tat,
                    now=now,
                    listed=due_ms + int(listed) if waits else None,
                )
                return [due_ms - now, due_ms, current] if waits else [0]

            per, size = float(step), int(burst)
            if set_step is not None:
                per, size = float(set_step), int(set_burst)
            stale = max(size * per, int(slack))
            if due != "" and int(gen) == current and int(due) + stale >= now:
                return answer(int(due), None)  # its own token, reserved in this generation
            start = max(tat, float(now))
            due_ms = max(now, math.ceil(start - (size - 1) * per))
            if due_ms - now < int(horizon):
                return answer(due_ms, round(start + per, 3))
            # Nothing reserved: a place in the key's line of waiters (see lua/rate_take.lua).
            mine, last, count = q("rate_line", key=key, task=task, now=now)[0]
            place = -1 if mine is None else int(mine) - int(listed)
            if place <= now:
                place = due_ms if last is None else max(due_ms, math.ceil(int(last) - int(listed) + per))
                q("rate_answer", key=key, task=task, tat=None, now=now, listed=place + int(listed))
            cap = max(int(longest), int(count) * 1000 / int(looks))
            return [int(min(place - now, cap)), 0, current]

        return self._atomic(take)

    def rate_usage(self) -> list[list[Any]]:
        rows = self._atomic(lambda q: q("rate_usage", now=self._now()))
        return [
            [key, step, burst, tat, int(w), int(o), int(now)] for key, step, burst, tat, w, o, now in rows
        ]

    # ------------------------------------------------------------------ unique keys

    def unique_take(self, *quads: str | int) -> list[str | int]:
        items = [
            (i // 4 + 1, str(quads[i]), str(quads[i + 1]), int(quads[i + 2]), str(quads[i + 3]))
            for i in range(0, len(quads), 4)
        ]
        # Keys locked in key order, so two producers' batches never wait on each other in a
        # circle; a key twice in a batch keeps its order (the first message takes it).
        items.sort(key=lambda item: item[1])

        def take(q: Query) -> list[tuple[int, str]]:
            now = self._now()
            duplicates = []
            for index, key, task, ttl, stale in items:
                if q("unique_take", key=key, task=task, ttl=ttl, stale=stale, now=now):
                    continue
                holder = q("unique_holder", key=key)
                if not holder:  # the upsert found the row, so it is there until we commit
                    raise OperationalError(f"unique key {key!r}: its holder vanished mid-transaction")
                duplicates.append((index, str(holder[0][0])))
            return duplicates

        found = self._atomic(take)
        self._sweep()
        return [x for index, holder in sorted(found) for x in (index, holder)]

    def unique_release(self, task: str) -> int:
        self._atomic(lambda q: q("unique_release", task=task), single=True)
        self._sweep()
        return 0

    def _sweep(self) -> None:
        """Now and then: delete unique keys past their TTL (their holders never released
        them: dead-lettered by RabbitMQ itself, or the publish failed)."""
        now = time.monotonic()
        with self._sweep_lock:
            if now - self._swept < SWEEP_EVERY:
                return
            self._swept = now
        self._atomic(lambda q: q("unique_sweep", now=self._now()), single=True)
