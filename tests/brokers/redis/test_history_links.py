"""The task page's links on Redis / Valkey (history_links.lua): one hash per parent and per
group, never more long-lived than the records they point to."""

from __future__ import annotations

import time
from collections.abc import Callable

from potatoq.brokers.base import HistoryRecord, HistorySettings
from potatoq.brokers.redis import RedisBroker
from potatoq.states import SUCCESS

DAY_MS = 86_400_000


def record(n: int, finished_at: float, parent: str | None = None) -> HistoryRecord:
    return HistoryRecord(
        task_id=f"t{n}",
        name="tests.step",
        queue="default",
        state=SUCCESS,
        finished_at=finished_at,
        parent_id=parent,
    )


def test_links_expire_with_max_age_until_max_count_trims_sooner(make: Callable[..., RedisBroker]) -> None:
    # no exact trim in this test (it would drop the old entry): the stream holds what is appended
    broker = make(history=HistorySettings(max_age=7 * 86400, max_count=10, trim_every=10**9))
    client, key = broker._client(), broker.keys.history
    now = time.time()
    client.xadd(key, {"r": b"{}"}, id=int((now - 3600) * 1000))  # an entry appended an hour ago
    broker.append_history([record(0, now, parent="p0")])
    assert client.pttl(f"{key}:lp:p0") > 6 * DAY_MS  # the stream isn't full: kept max_age
    assert [t.task_id for t in broker.history_links(parent_id="p0")] == ["t0"]
    broker.append_history([record(n, now) for n in range(1, 9)])  # 10 entries: full
    broker.append_history([record(9, now, parent="p1")])
    # kept about as long as the stream spans (an hour): then its record is trimmed by count
    assert 3_500_000 < client.pttl(f"{key}:lp:p1") <= 3_700_000
    assert client.pttl(f"{key}:lp:p0") > 6 * DAY_MS  # a key is only shortened when written


def test_links_are_written_after_a_script_flush(broker: RedisBroker) -> None:
    broker.append_history([record(0, time.time(), parent="p")])
    broker._client().script_flush()  # both scripts of the next append are refused, then loaded
    broker.append_history([record(1, time.time(), parent="p")])
    assert [t.task_id for t in broker.history_links(parent_id="p")] == ["t0", "t1"]
