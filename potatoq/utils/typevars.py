"""The type variables of the typed call sites: ``Task[P, R]`` and ``AsyncResult[R]``.

``P`` is a task function's parameters and ``R`` its return type, so that
``add.delay("x")`` is a type error and ``add.delay(1, 2).get()`` an ``int``. Both have
defaults (PEP 696, from ``typing_extensions`` for the checkers only, so nothing is imported
at run time): a bare ``Task`` or ``AsyncResult`` in user code means "any task", as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import ParamSpec, TypeVar

    P = ParamSpec("P", default=...)
    R = TypeVar("R", covariant=True, default=Any)  # noqa: PLC0105 - R as in Task[P, R]
else:
    from typing import ParamSpec, TypeVar

    P = ParamSpec("P")
    R = TypeVar("R", covariant=True)  # noqa: PLC0105 - R as in Task[P, R]

#: Any value: what ``get()`` of a coroutine function's result gives once the worker awaited it.
T = TypeVar("T")

__all__ = ["P", "R", "T"]
