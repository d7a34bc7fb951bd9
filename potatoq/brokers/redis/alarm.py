"""A local alarm that ends an idle worker's Redis wait at a due time, to the millisecond.

Redis ends a blocked command on its timeout only at its next cron tick (``hz``, 10 by
default: every 100 ms), so a BZPOPMIN whose timeout is the earliest due time returned 0 to
100 ms after it. Instead, the wait arms this alarm for the due time and blocks with its
usual timeout; at the due time the alarm's thread pushes to the waiter's wake key (as
``interrupt()`` does), which ends the block at once. The tasks stay in Redis: only the
timer is local.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger("potatoq.brokers.redis")


class DueAlarm:
    """One thread per process and broker ringing wake keys at their due times."""

    def __init__(self, ring: Callable[[list[str]], None]) -> None:
        self._ring = ring  # pushes to the given wake keys (on the alarm thread's connection)
        self._cond = threading.Condition()
        self._alarms: dict[int, tuple[float, str]] = {}  # id -> (monotonic due time, wake key)
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.pid = os.getpid()
        self.rung = 0  # wake keys pushed so far (for tests and stats)

    def arm(self, seconds: float, key: str) -> int:
        """Push to ``key`` in ``seconds``, unless :meth:`disarm` is called first."""
        with self._cond:
            alarm = next(self._ids)
            self._alarms[alarm] = (time.monotonic() + max(0.0, seconds), key)
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(target=self._run, name="potatoq-redis-alarm", daemon=True)
                self._thread.start()
            self._cond.notify()
            return alarm

    def disarm(self, alarm: int) -> None:
        with self._cond:
            self._alarms.pop(alarm, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._alarms:
                    self._cond.wait()
                if self._closed:
                    return
                now = time.monotonic()
                due = [alarm for alarm, (at, _) in self._alarms.items() if at <= now]
                if not due:
                    self._cond.wait(min(at for at, _ in self._alarms.values()) - now)
                    continue
                keys = sorted({self._alarms.pop(alarm)[1] for alarm in due})
            try:
                self._ring(keys)
                self.rung += len(keys)
            except Exception as exc:  # noqa: BLE001 - the wait's own timeout still ends it
                log.warning("waking a wait at a due time failed: %s", exc)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._alarms.clear()
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
