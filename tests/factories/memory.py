from __future__ import annotations

from typing import Any

from potatoq.brokers.base import BrokerConfig

NAME = "memory"
ORDER = 0


def make_config(ctx: Any) -> BrokerConfig:
    return BrokerConfig(url=f"memory://{ctx.unique}")


def inject_raw(broker: Any, queue: str, raw: bytes) -> None:
    """Put ``raw`` straight into the store as a ready task, bypassing Message.encode()."""
    broker._put_raw(queue, raw)
