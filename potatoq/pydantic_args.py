"""``@app.task(pydantic=True)`` (Celery 5.5): pydantic models in, plain data out.

The caller sends plain data (a model can't cross JSON), the task function receives models:
each argument annotated with a pydantic model (or ``Model | None``) is validated into it
with ``model_validate``, and a model the function returns is stored as
``model.model_dump(mode="json")``. Options, with Celery's names and defaults:

- ``pydantic_strict`` (``False``): pydantic's strict mode for the arguments;
- ``pydantic_context``: extra validation context; ``celery_app`` / ``potatoq_app`` and
  ``celery_task_name`` / ``potatoq_task_name`` are always in it;
- ``pydantic_dump_kwargs``: keyword arguments for ``model_dump`` (``mode`` defaults to
  ``"json"``).

Annotations are resolved on the first call, so a model defined after the task (or a string
annotation under ``from __future__ import annotations``) works.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from .app import Potatoq

OPTIONS = ("pydantic", "pydantic_strict", "pydantic_context", "pydantic_dump_kwargs")


def pydantic_runner(
    fun: Callable[..., Any],
    *,
    app: Potatoq,
    task_name: str,
    strict: bool = False,
    context: Mapping[str, Any] | None = None,
    dump_kwargs: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """``fun`` wrapped to validate its model arguments and dump a returned model."""
    try:
        from pydantic import BaseModel
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"task {task_name} is declared with pydantic=True, but pydantic isn't installed: "
            "pip install 'potatoq[pydantic]'"
        ) from exc
    if context is not None and not isinstance(context, Mapping):
        raise ImproperlyConfigured(
            f"task {task_name}: pydantic_context must be a dict, not {type(context).__name__}"
        )
    if dump_kwargs is not None and not isinstance(dump_kwargs, Mapping):
        raise ImproperlyConfigured(
            f"task {task_name}: pydantic_dump_kwargs must be a dict, not {type(dump_kwargs).__name__}"
        )
    validation_context = {
        **(context or {}),
        "celery_app": app,
        "celery_task_name": task_name,
        "potatoq_app": app,
        "potatoq_task_name": task_name,
    }
    dump_options = {"mode": "json", **(dump_kwargs or {})}
    signature = inspect.signature(fun)

    @functools.cache
    def models() -> dict[str, type[BaseModel]]:
        try:
            hints = typing.get_type_hints(fun)
        except Exception:  # noqa: BLE001 - an unresolvable annotation: use them as written
            hints = {name: p.annotation for name, p in signature.parameters.items()}
        found = {}
        for name, param in signature.parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            model = _model_in(hints.get(name), BaseModel)
            if model is not None:
                found[name] = model
        return found

    def validated(args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        bound = signature.bind(*args, **kwargs)
        for name, model in models().items():
            value = bound.arguments.get(name)
            if value is not None:
                bound.arguments[name] = model.model_validate(value, strict=strict, context=validation_context)
        return bound

    def dumped(value: Any) -> Any:
        return value.model_dump(**dump_options) if isinstance(value, BaseModel) else value

    if inspect.iscoroutinefunction(fun):

        @functools.wraps(fun)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            bound = validated(args, kwargs)
            return dumped(await fun(*bound.args, **bound.kwargs))

        return run_async

    @functools.wraps(fun)
    def run(*args: Any, **kwargs: Any) -> Any:
        bound = validated(args, kwargs)
        return dumped(fun(*bound.args, **bound.kwargs))

    return run


def _model_in(annotation: Any, base: type[Any]) -> type[Any] | None:
    """The model class an annotation names: ``Model`` or ``Model | None`` (``Optional``)."""
    if isinstance(annotation, type) and issubclass(annotation, base):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _model_in(members[0], base)
    return None
