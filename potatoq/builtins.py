"""Tasks every app has: the bodies of ``task.map``, ``task.starmap`` and ``task.chunks``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import Potatoq


def register(app: Potatoq) -> None:
    from .canvas import maybe_signature

    def xmap(task: dict[str, Any], it: list[Any]) -> list[Any]:
        sig = maybe_signature(task, app=app)
        return [sig.type(item) for item in it]

    def xstarmap(task: dict[str, Any], it: list[list[Any]]) -> list[Any]:
        sig = maybe_signature(task, app=app)
        return [sig.type(*item) for item in it]

    app._task_from_fun(xmap, name="potatoq.map")
    app._task_from_fun(xstarmap, name="potatoq.starmap")
