from __future__ import annotations

from typing import Any

from potatoq.brokers.base import BrokerConfig

NAME = "memory"
ORDER = 0


def make_config(ctx: Any) -> BrokerConfig:
    return BrokerConfig(url=f"memory://{ctx.unique}")
