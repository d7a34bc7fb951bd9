"""The dashboard's Limits page: read concurrency and rate limits through the same broker
calls as ``potatoq limits``, and set or clear a run-time override from a form with the
same rules (``N`` is a concurrency limit, a value with ``/`` such as ``100/s`` is a rate)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..brokers.limits import LimitUsage, RateUsage, format_rate, parse_rate
from ..exceptions import OperationalError

__all__ = ["LimitsView", "apply", "format_rate", "read"]


@dataclass
class LimitsView:
    """What the page shows; a ``*_note`` replaces a table the broker can't fill."""

    limits: list[LimitUsage] = field(default_factory=list)
    rates: list[RateUsage] = field(default_factory=list)
    limits_note: str | None = None
    rates_note: str | None = None


def read(broker: Any) -> LimitsView:
    view = LimitsView()
    name = type(broker).__name__
    if broker.capabilities.concurrency_limits:
        view.limits = broker.limits()
    else:
        view.limits_note = f"{name} doesn't enforce concurrency limits."
    if broker.capabilities.rate_limits:
        view.rates = broker.rates()
    else:
        view.rates_note = f"{name} doesn't enforce global rate limits."
    return view


def _burst(text: str) -> int | None:
    if not text.strip():
        return None  # the broker's default (1)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"burst must be a positive whole number, got {text!r:.40}") from None


def _set(broker: Any, key: str, value: str, burst_text: str) -> str:
    if "/" in value:
        if not broker.capabilities.rate_limits:
            raise ValueError(f"{type(broker).__name__} doesn't enforce global rate limits")
        per_second = parse_rate(value)
        burst = _burst(burst_text)
        broker.set_rate(key, per_second, burst)
        return f"{key}: at most {format_rate(per_second)}, {burst or 1} at once"
    if burst_text.strip():
        # A burst only means something for a rate: refuse it rather than drop it silently.
        raise ValueError("burst applies to a rate like 100/s, not to a concurrency limit")
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ValueError(f"limit must be a positive whole number or a rate like 100/s, got {value!r:.40}")
    broker.set_limit(key, limit)
    return f"{key}: at most {limit} running"


def apply(broker: Any, form: dict[str, str]) -> str:
    """Set (``action=set``, ``key``, ``limit``, ``burst``) or clear (``action=clear``,
    ``key``) an override; returns what was done, raises ValueError with what is wrong."""
    if not broker.capabilities.concurrency_limits:
        raise ValueError(f"{type(broker).__name__} doesn't enforce concurrency limits")
    action, key = form.get("action", "set"), form.get("key", "").strip()
    if action not in ("set", "clear"):
        raise ValueError(f"action must be set or clear, got {action!r:.40}")
    if not key:
        raise ValueError("give a limit key: a task name, name[key] or queue:NAME")
    try:
        if action == "set":
            return _set(broker, key, form.get("limit", "").strip(), form.get("burst", ""))
        # As `potatoq limits clear`: both overrides of the key go, the tasks' own limits apply.
        broker.set_limit(key, None)
        if broker.capabilities.rate_limits and any(u.key == key and u.override for u in broker.rates()):
            broker.set_rate(key, None)
        return f"{key}: override cleared"
    except OperationalError as exc:
        raise ValueError(str(exc)) from None
