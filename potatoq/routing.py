"""``task_routes``: which queue (and priority) a task goes to.

Accepted forms, as in Celery: a dict of task-name patterns (globs or ``re.compile``
objects) to a queue name or an options dict; a router function
``router(name, args, kwargs, options, task=None, **kw)``; a dotted path to one; or a list
of any of these (and of ``(pattern, route)`` pairs), tried in order, first match wins.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .config import load_object

Route = dict[str, Any]
Router = Callable[..., Any]

#: Celery's default queue is named ``celery``; potatoq's is ``default``. A migrated project's
#: routes, ``queue="celery"`` arguments and ``-Q celery`` command lines all mean the default
#: queue, so the name is read as ``default`` wherever a queue is named (messages, routes,
#: worker and CLI queue lists): the find-and-replace keeps working and existing potatoq
#: deployments keep their queue.
CELERY_DEFAULT_QUEUE = "celery"
DEFAULT_QUEUE = "default"


def queue_name(name: str) -> str:
    """The queue ``name`` stands for: ``celery`` is another name of the ``default`` queue."""
    return DEFAULT_QUEUE if name == CELERY_DEFAULT_QUEUE else name


def _expand(route: Any) -> Route | None:
    if route is None:
        return None
    if isinstance(route, str):
        return {"queue": route}
    if isinstance(route, Mapping):
        out = dict(route)
        if "queue" in out and isinstance(out["queue"], Mapping):  # kombu Queue-as-dict style
            out["queue"] = out["queue"].get("name")
        return out
    name = getattr(route, "name", None)  # a kombu-like Queue object
    if isinstance(name, str):
        return {"queue": name}
    raise TypeError(f"a route must be a queue name or an options dict, got {route!r}")


def _pattern_matches(pattern: Any, name: str) -> bool:
    if isinstance(pattern, re.Pattern):
        compiled: re.Pattern[str] = pattern
        return compiled.match(name) is not None
    text = str(pattern)
    if any(c in text for c in "*?["):
        return fnmatch.fnmatchcase(name, text)
    return text == name


class MapRouter:
    """Patterns to routes, checked in insertion order (exact names first)."""

    def __init__(self, table: Mapping[Any, Any] | Sequence[tuple[Any, Any]]) -> None:
        items = list(table.items()) if isinstance(table, Mapping) else list(table)
        exact = [(p, r) for p, r in items if isinstance(p, str) and not any(c in p for c in "*?[")]
        other = [(p, r) for p, r in items if (p, r) not in exact]
        self.items = exact + other

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> Route | None:
        for pattern, route in self.items:
            if _pattern_matches(pattern, name):
                return _expand(route)
        return None


def prepare(routes: Any) -> list[Router]:
    """Turn a ``task_routes`` value into an ordered list of router callables."""
    if routes is None:
        return []
    if isinstance(routes, Mapping):
        return [MapRouter(routes)]
    if isinstance(routes, str):
        return [_load_router(routes)]
    if callable(routes):
        return [routes]
    out: list[Router] = []
    items = list(routes)
    if items and all(isinstance(i, tuple) and len(i) == 2 and not callable(i[0]) for i in items):
        return [MapRouter(items)]
    for item in items:
        if (
            isinstance(item, list | tuple)
            and item
            and all(isinstance(i, tuple) and len(i) == 2 for i in item)
        ):
            out.append(MapRouter(item))
        else:
            out.extend(prepare(item))
    return out


def _load_router(path: str) -> Router:
    obj = load_object(path)
    if isinstance(obj, type):
        obj = obj()
    if hasattr(obj, "route_for_task"):
        return obj.route_for_task  # type: ignore[no-any-return]
    if not callable(obj):
        raise TypeError(f"router {path!r} is not callable")
    return obj  # type: ignore[no-any-return]


def route(
    routers: Sequence[Router], name: str, args: Any, kwargs: Any, options: Mapping[str, Any], task: Any = None
) -> Route:
    """The first router's answer for this call, expanded to an options dict (or {})."""
    for router in routers:
        try:
            answer = router(name, args, kwargs, options, task=task)
        except TypeError:
            answer = router(name, args, kwargs, options)
        expanded = _expand(answer)
        if expanded:
            return expanded
    return {}
