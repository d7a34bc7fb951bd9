"""Valkey 8 in the contract suite, reached through a ``valkey://`` URL (translated for redis-py)."""

from __future__ import annotations

from typing import Any

from potatoq.brokers.base import BrokerConfig
from tests import services
from tests.factories.redis import SLOW_FALLBACK_OPTIONS, inject_raw, make_config_for

NAME = "valkey"
SERVICE = "valkey"
ORDER = 31

__all__ = ["NAME", "ORDER", "SERVICE", "SLOW_FALLBACK_OPTIONS", "inject_raw", "make_config"]


def make_config(ctx: Any) -> BrokerConfig:
    target = services.url(SERVICE)
    if target.startswith("redis://"):
        target = "valkey://" + target[len("redis://") :]
    return make_config_for(ctx, target)
