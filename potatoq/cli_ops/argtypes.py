"""Option value parsers: a bad value is an argparse error naming it (exit status 2)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["number_of_seconds", "whole_number"]


def whole_number(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An int parser, optionally bounded: ``whole_number(1)`` accepts 1, 2, …"""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            if high is None:
                wanted = f"at least {low}"
            elif low is None:
                wanted = f"at most {high}"
            else:
                wanted = f"between {low} and {high}"
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {value}")
        return value

    return parse


def number_of_seconds(*, negative: bool = True) -> Callable[[str], float]:
    """A float of seconds; ``negative=False`` refuses values below 0."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number of seconds, got {text!r}")
        if not negative and value < 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
        return value

    return parse
