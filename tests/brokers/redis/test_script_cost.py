"""The Lua scripts of the claim and settle path do no work in proportion to a queue's size.

Redis's MONITOR shows every command a script runs, with its arguments. A claim, a
``settle_and_claim`` and a plain settle are recorded on a queue holding a few tasks and
again on the same queue holding thousands (ready, and far-future delayed): the commands
must be the same, one for one, and none may range over a whole key (``ZRANGEBYSCORE``
without ``LIMIT``, ``LRANGE``/``ZRANGE 0 -1``, ``SMEMBERS``, ``HGETALL``, ``KEYS`` …), so a
loop over a queue or an unbounded read added to a script fails here, whatever the timing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from potatoq.brokers.base import Complete, Delivery, ResultRecord, WorkerRef
from potatoq.brokers.redis import RedisBroker
from potatoq.brokers.redis.scripts import SCRIPTS
from potatoq.message import Message, new_id

WORKER = WorkerRef("node-cost", 1)
SMALL, LARGE = 5, 3000

#: Commands that read or touch every member of a key.
WHOLE_KEY = {
    "KEYS",
    "SCAN",
    "SMEMBERS",
    "SINTER",
    "SUNION",
    "SDIFF",
    "HGETALL",
    "HKEYS",
    "HVALS",
    "SORT",
    "LREM",
}
RANGES = {"LRANGE", "ZRANGE", "ZREVRANGE"}
SCORE_RANGES = {"ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZRANGEBYLEX", "ZREVRANGEBYLEX"}


def _script_commands(broker: RedisBroker, action: Callable[[], Any]) -> list[list[str]]:
    """The commands the broker's claim and settle scripts ran during ``action`` (on its keys
    only: the server may be shared), each as [NAME, args...]. History scripts (a batch of
    buffered events, flushed now and then) are left out: their cost is per event."""
    url = broker.config.url.replace("valkey://", "redis://", 1)
    prefix = broker.options.global_keyprefix
    sentinel = f"{prefix}:sentinel:{uuid.uuid4().hex}"
    names = {script.sha: script.name for script in SCRIPTS.values()}
    seen: list[list[str]] = []
    current = ""
    monitor_client = redis.Redis.from_url(url)
    other = redis.Redis.from_url(url)
    try:
        with monitor_client.monitor() as monitor:
            action()
            other.get(sentinel)  # MONITOR is a stream: this marks the end of ours
            for event in monitor.listen():
                command = event["command"]
                if sentinel in command:
                    break
                if prefix not in command:
                    continue
                if event.get("client_type") != "lua":
                    words = command.split()
                    if words[0].upper() == "EVALSHA":
                        current = names.get(words[1], "unknown")
                elif not current.startswith("history"):
                    seen.append(command.split())
    finally:
        monitor_client.close()
        other.close()
    return seen


def _unbounded(command: list[str]) -> bool:
    name = command[0].upper()
    if name in WHOLE_KEY:
        return True
    if name in RANGES:
        return command[2:4] == ["0", "-1"]
    if name in SCORE_RANGES or (name == "ZRANGE" and "BYSCORE" in (a.upper() for a in command)):
        return "LIMIT" not in (a.upper() for a in command)
    return False


def _fill(broker: RedisBroker, n: int) -> None:
    far = time.time() + 86400
    for start in range(0, n, 500):
        size = min(500, n - start)
        broker.enqueue([Message(id=new_id(), task="t.noop", queue="cost") for _ in range(size)])
        broker.enqueue([Message(id=new_id(), task="t.noop", queue="cost", eta=far) for _ in range(size)])


def _record(broker: RedisBroker, n: int) -> dict[str, list[list[str]]]:
    """The script commands of one claim, one settle_and_claim and one settle, with about
    ``n`` ready and ``n`` delayed tasks in the queue."""
    held: list[Delivery] = []

    def claim() -> None:
        delivery = broker.claim(["cost"], WORKER)
        assert delivery is not None
        held.append(delivery)

    def result(delivery: Delivery) -> Complete:
        return Complete(
            result=ResultRecord(task_id=delivery.id, state="SUCCESS", result=1, date_done=time.time())
        )

    def settle_and_claim() -> None:
        delivery = held.pop()
        _, following = broker.settle_and_claim(delivery, result(delivery), ["cost"], WORKER)
        assert following is not None
        held.append(following)

    def settle() -> None:
        delivery = held.pop()
        assert broker.settle(delivery, result(delivery))

    _fill(broker, n)
    recorded = {}
    for name, action in (("claim", claim), ("settle_and_claim", settle_and_claim), ("settle", settle)):
        recorded[name] = _script_commands(broker, action)
    return recorded


def _shape(commands: list[list[str]]) -> list[str]:
    return [command[0].upper() for command in commands]


def test_claim_and_settle_scripts_cost_the_same_behind_a_large_queue(broker: RedisBroker) -> None:
    small = _record(broker, SMALL)
    broker.purge(["cost"])
    large = _record(broker, LARGE)
    for name in small:
        assert small[name], f"{name}: no script command seen (MONITOR filter wrong?)"
        assert _shape(small[name]) == _shape(large[name]), (
            f"{name} runs other commands behind {LARGE} tasks than behind {SMALL}:\n"
            f"{_shape(small[name])}\n{_shape(large[name])}"
        )
        unbounded = [" ".join(c[:6]) for c in large[name] if _unbounded(c)]
        assert not unbounded, f"{name} reads a whole key: {unbounded}"
