"""Redis: an idle worker doesn't poll. An idle ``-c 2`` worker on a private server of its
own, counted with ``INFO commandstats`` (every command the server ran, those run inside
scripts included, minus this test's own ``INFO`` calls) over a window of seconds: the seed
promises no polling storms, the issue's target is 2 commands a second."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from potatoq.brokers.base import BrokerConfig

from . import servers
from .harness import FaultEnv, client, report, sized, wait_for

# Seconds counted: two heartbeat and recovery rounds; the full run covers an idle wait of
# each child too (they block 60 s at a time).
WINDOW = float(sized(12, 65))
TARGET = 2.0  # commands a second (the goal; the assertion leaves room for load)


def _commands(server: redis.Redis[bytes]) -> int:
    stats = server.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


@pytest.mark.slow
def test_an_idle_worker_makes_about_two_commands_a_second(tmp_path: Path) -> None:
    reason = servers.available("redis")
    if reason is not None:
        pytest.skip(reason)
    instance = servers.PrivateRedis()
    instance.start()
    env = FaultEnv(tmp_path, BrokerConfig(url=instance.url), "redis")
    server = redis.Redis(host="127.0.0.1", port=instance.port)
    try:
        with client(env) as proj:
            # The default intervals (the fault suite's app heartbeats every 0.5 s).
            defaults = {"worker_heartbeat_interval": 5.0, "worker_dead_after": 60.0}
            env.worker("-c", "2", "-l", "info", conf=defaults)
            wait_for(lambda: len(proj.app.broker.workers()) == 1, what="the worker's heartbeat")
            # Both children idle: each has claimed nothing and blocks in wait().
            blocked = lambda: server.info("clients")["blocked_clients"] >= 2  # noqa: E731
            wait_for(blocked, what="both children to block in wait()")
            proj.app.close()  # this test's own client sends nothing while counting
            before = _commands(server)
            started = time.monotonic()
            time.sleep(WINDOW)  # the measurement window itself: nothing to await
            rate = (_commands(server) - before) / (time.monotonic() - started)
        report("idle worker -c 2", "redis", commands_per_second=round(rate, 2))
        assert rate <= 2 * TARGET, f"an idle -c 2 worker ran {rate:.1f} commands a second"
    finally:
        server.close()
        env.close()
        instance.close()
