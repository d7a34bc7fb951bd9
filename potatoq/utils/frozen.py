"""Building frozen, slotted dataclasses on a hot path.

The ``__init__`` that ``dataclasses`` generates for a frozen class sets each field through
``object.__setattr__`` looked up anew per field, and takes keyword arguments: about 3 us for
a ten-field :class:`~potatoq.message.Message`, paid twice per task in a worker (the message,
then its delivery). :func:`positional_builder` makes a constructor that writes the slots
directly instead, at half the cost. It checks nothing: callers pass every field, in
declaration order, already validated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["positional_builder"]

T = TypeVar("T")


def positional_builder(cls: type[T]) -> Callable[..., T]:
    """A function ``build(*values)`` returning a ``cls`` whose fields are ``values``, in the
    order of ``dataclasses.fields(cls)`` (init=False fields included)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen, slotted dataclass")
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    setters = [cls.__dict__[name].__set__ for name in names]
    new = object.__new__

    def build(*values: Any) -> T:
        obj = new(cls)
        for setter, value in zip(setters, values, strict=True):
            setter(obj, value)
        return obj

    build.__doc__ = f"{cls.__name__}({', '.join(names)}), fields in this order, unchecked."
    return build
