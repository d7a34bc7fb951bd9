from __future__ import annotations

from typing import Any

from potatoq.brokers.base import BrokerConfig

NAME = "sqlite"
ORDER = 10


def make_config(ctx: Any) -> BrokerConfig:
    return BrokerConfig(url=f"sqlite:///{ctx.tmp_path / 'broker.sqlite3'}")
