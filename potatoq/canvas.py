"""Signatures and the canvas: ``chain``, ``group``, ``chord``, ``chunks``, ``map``.

A :class:`Signature` is a dict (so it travels inside messages as plain JSON): the task
name, partial args and kwargs, and call options. Applying one *freezes* it (fixing the task
ids so the caller gets its results back at once) and turns it into messages with
:func:`build_messages`:

* a chain sends its first task; the rest rides in the ``chain`` header and each worker
  sends the next step with the result prepended;
* a group sends every member with its ``group_id`` / ``group_index``;
* a chord sends its header members, each carrying a ``chord`` header naming the body; the
  header task that completes the count enqueues the body in the same broker step
  (:class:`~potatoq.brokers.base.ChordJoin`), and the body reads the parts in order.

A group followed by more steps in a chain becomes a chord, as in Celery.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .message import Message, new_id
from .unique import HEADER as UNIQUE_HEADER

if TYPE_CHECKING:
    from .app import Potatoq
    from .result import AsyncResult, GroupResult
    from .task import Task


def _app_of(app: Potatoq | None) -> Potatoq:
    if app is not None:
        return app
    from .app import current_app

    return current_app()


class Signature(dict[str, Any]):
    """A task call that can be sent later, passed around, and combined."""

    _app: Potatoq | None

    @property
    def tasks(self) -> list[Signature]:
        """The members of a chain or group (a plain signature has none)."""
        return [
            maybe_signature(t, app=getattr(self, "_app", None))
            for t in (self.get("kwargs") or {}).get("tasks", [])
        ]

    def __init__(
        self,
        task: str | Task | Mapping[str, Any] | None = None,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        subtask_type: str | None = None,
        immutable: bool = False,
        app: Potatoq | None = None,
        **ex: Any,
    ) -> None:
        if isinstance(task, Mapping):
            dict.__init__(self, task)
            self._app = app
            return
        name = task if isinstance(task, str) or task is None else task.name
        if app is None and task is not None and not isinstance(task, str):
            app = task.app
        opts = dict(options or {})
        opts.update(ex)
        for key in ("link", "link_error"):
            if key in opts:
                opts[key] = _callbacks(opts[key])
        immutable = bool(opts.pop("immutable", immutable))
        dict.__init__(
            self,
            task=name,
            args=tuple(args or ()),
            kwargs=dict(kwargs or {}),
            options=opts,
            subtask_type=subtask_type,
            immutable=immutable,
        )
        self._app = app

    # -- fields ---------------------------------------------------------------------------
    @property
    def task(self) -> str:
        return str(self["task"])

    @property
    def name(self) -> str:
        return str(self["task"])

    @property
    def args(self) -> tuple[Any, ...]:
        return tuple(self.get("args") or ())

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.get("kwargs") or {})

    @property
    def options(self) -> dict[str, Any]:
        opts: dict[str, Any] = self.setdefault("options", {})
        return opts

    @property
    def immutable(self) -> bool:
        return bool(self.get("immutable"))

    @property
    def subtask_type(self) -> str | None:
        return self.get("subtask_type")

    @property
    def id(self) -> str | None:
        return self.options.get("task_id")

    @property
    def app(self) -> Potatoq:
        return _app_of(getattr(self, "_app", None))

    @property
    def type(self) -> Task:
        return self.app.tasks[self.task]

    # -- building -------------------------------------------------------------------------
    def clone(
        self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None, **opts: Any
    ) -> Any:
        """A copy with ``args`` prepended (unless immutable), kwargs and options merged."""
        copy = from_dict(_deepcopy(dict(self)), app=getattr(self, "_app", None))
        if not copy.immutable:
            if args:
                copy["args"] = tuple(args) + copy.args
            if kwargs:
                copy["kwargs"] = {**copy.kwargs, **kwargs}
        for key in ("link", "link_error"):
            if key in opts:
                opts[key] = [*copy.options.get(key, []), *_callbacks(opts[key])]
        if opts:
            copy.options.update(opts)
        return copy

    partial = clone

    def set(self, immutable: bool | None = None, **options: Any) -> Signature:
        if immutable is not None:
            self["immutable"] = immutable
        for key in ("link", "link_error"):
            if key in options:
                options[key] = _callbacks(options[key])
        self.options.update(options)
        return self

    def set_immutable(self, immutable: bool) -> None:
        self["immutable"] = immutable

    def link(self, callback: Signature) -> Signature:
        self.options.setdefault("link", []).append(dict(callback))
        return callback

    def link_error(self, errback: Signature) -> Signature:
        self.options.setdefault("link_error", []).append(dict(errback))
        return errback

    def on_error(self, errback: Signature) -> Signature:
        self.link_error(errback)
        return self

    def freeze(self, _id: str | None = None, group_id: str | None = None, **_: Any) -> AsyncResult:
        """Fix this call's task id (and its parts' ids) and return its result handle."""
        from .result import AsyncResult

        if _id is not None:
            self.options["task_id"] = _id
        task_id = self.fix_id()
        if group_id is not None:
            self.options["group_id"] = group_id
        return AsyncResult(task_id, app=self.app, task_name=self.task, ignored=self._ignores_result())

    def fix_id(self) -> str:
        """This call's task id, made now if it has none (what freeze() fixes, without the
        result handle)."""
        task_id: str | None = self.options.get("task_id")
        if not task_id:
            task_id = self.options["task_id"] = new_id()
        return task_id

    def _ignores_result(self) -> bool:
        if "ignore_result" in self.options:
            return bool(self.options["ignore_result"])
        task = self.app.tasks.get(self.task)
        if task is not None and task.ignore_result is not None:
            return bool(task.ignore_result)
        return bool(self.app.conf.task_ignore_result)

    # -- sending --------------------------------------------------------------------------
    def apply_async(
        self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> Any:
        """Send it (merging partial args, kwargs and options) and return its result."""
        sig = self.clone(args, kwargs, **options) if (args or kwargs or options) else self
        app = sig.app
        if app.conf.task_always_eager:
            return app.apply_eagerly(sig)
        connection = sig.options.pop("connection", None)
        retry = sig.options.pop("retry", None)
        retry_policy = sig.options.pop("retry_policy", None)
        if sig.options.pop("_check_arguments", True) and sig.subtask_type is None:
            check_arguments(app, sig)
        result = sig.freeze()
        messages = build_messages(app, sig)
        if sig.subtask_type is not None:
            for message in messages:
                if UNIQUE_HEADER in message.headers:
                    raise ValueError(
                        f"task {message.task!r} is unique and can't be sent in a {sig.subtask_type}: "
                        "a duplicate isn't queued, so its place would never get a result "
                        "(send unique tasks on their own; see docs/unique.md)"
                    )
        app.send_messages(messages, connection=connection, retry=retry, retry_policy=retry_policy)
        holder = messages[0].duplicate_of if sig.subtask_type is None and messages else None
        if holder is not None:  # a unique task whose key is held: the holder's result
            return app.AsyncResult(holder, task_name=sig.task)
        return result

    def delay(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)

    async def adelay(self, *args: Any, **kwargs: Any) -> Any:
        import asyncio

        return await asyncio.to_thread(self.apply_async, args, kwargs)

    def apply(
        self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> Any:
        """Run it here and now (eagerly), returning its result."""
        return self.app.apply_eagerly(self.clone(args, kwargs, **options))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task inline in this process, as Celery does for a plain signature."""
        sig = self.clone(args, kwargs)
        return sig.type(*sig.args, **sig.kwargs)

    def __invert__(self) -> Any:
        return self.apply_async().get()

    def __or__(self, other: Any) -> Signature:  # type: ignore[override]
        if isinstance(other, _chain):
            return _chain(self, *other.tasks, app=self._app_or_none(other))
        if isinstance(other, group) and not isinstance(self, group):
            return _chain(self, other, app=self._app_or_none(other))
        if isinstance(other, Signature):
            if isinstance(self, group):
                return chord(self, body=other, app=self._app_or_none(other))
            return _chain(self, other, app=self._app_or_none(other))
        return NotImplemented

    def _app_or_none(self, other: Signature) -> Potatoq | None:
        return getattr(self, "_app", None) or getattr(other, "_app", None)

    def __deepcopy__(self, memo: Any) -> Signature:
        return from_dict(_deepcopy(dict(self)), app=getattr(self, "_app", None))

    def __repr__(self) -> str:
        args = ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()])
        return f"{'%' if self.immutable else ''}{self.task}({args})"

    def __reduce__(self) -> Any:
        return from_dict, (dict(self),)

    def __hash__(self) -> int:  # type: ignore[override]
        return id(self)


subtask = signature_class = Signature


def check_arguments(app: Potatoq, sig: Signature) -> None:
    """Raise ``TypeError`` when a registered task can't take these arguments (Celery's
    argument check at call time, skipped for tasks declared with ``typing=False``)."""
    task = app.tasks.get(sig.task)
    if task is None or not getattr(task, "typing", True):
        return
    fun = getattr(task, "__header__", None) or task.run
    try:
        params = _signature_of(fun)
    except TypeError:  # an unhashable callable object as the task's function: not cached
        params = _signature_of.__wrapped__(fun)
    if params is None:
        return
    args = sig.args
    if task.bound:
        args = (task, *args)
    try:
        params.bind(*args, **sig.kwargs)
    except TypeError as exc:
        raise TypeError(f"{sig.task}(): {exc}") from None


@functools.lru_cache(maxsize=1024)
def _signature_of(fun: Callable[..., Any]) -> inspect.Signature | None:
    """The call signature of a task's function, or None when it has none to check.

    Cached: building it costs about 20 us, on every ``delay()`` otherwise, and a task's
    function doesn't change (a bound ``run`` compares equal across attribute reads)."""
    try:
        return inspect.signature(fun)
    except (TypeError, ValueError):
        return None


def _callbacks(value: Any) -> list[dict[str, Any]]:
    """``link=`` / ``link_error=`` accept one signature or a list of them."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [dict(value)]
    return [dict(v) for v in value]


def _deepcopy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deepcopy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deepcopy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_deepcopy(v) for v in value)
    return value


class _chain(Signature):
    """Run tasks one after another, each result passed to the next (``a | b | c``)."""

    def __init__(self, *tasks: Any, app: Potatoq | None = None, **options: Any) -> None:
        if len(tasks) == 1 and not isinstance(tasks[0], Mapping) and isinstance(tasks[0], Iterable):
            tasks = tuple(tasks[0])
        flat: list[Signature] = []
        for t in tasks:
            sig = maybe_signature(t, app=app)
            if isinstance(sig, group) and len(sig) == 1 and not sig.options:
                sig = sig.tasks[0]  # a one-task group is unrolled (Celery 5)
            if isinstance(sig, _chain) and not sig.options:
                flat.extend(sig.tasks)
            else:
                flat.append(sig)
        app = app or next((getattr(t, "_app", None) for t in flat if getattr(t, "_app", None)), None)
        Signature.__init__(self, "potatoq.chain", (), {"tasks": flat}, options, subtask_type="chain", app=app)

    @property
    def tasks(self) -> list[Signature]:
        return [maybe_signature(t, app=getattr(self, "_app", None)) for t in self["kwargs"]["tasks"]]

    def clone(
        self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None, **opts: Any
    ) -> Any:
        copy = from_dict(_deepcopy(dict(self)), app=getattr(self, "_app", None))
        if (args or kwargs) and copy.tasks:
            tasks = copy.tasks
            tasks[0] = tasks[0].clone(args, kwargs)
            copy["kwargs"]["tasks"] = tasks
        copy.options.update(opts)
        return copy

    def freeze(self, _id: str | None = None, group_id: str | None = None, **_: Any) -> Any:
        # A chain's id is its last task's id (Celery 5.4+: apply_async(task_id=…) names it).
        _id = _id or self.options.pop("task_id", None)
        tasks = self.tasks
        previous = None
        result = None
        for i, task in enumerate(tasks):
            result = task.freeze(_id if i == len(tasks) - 1 else None)
            if previous is not None:
                result.parent = previous
            previous = result
        self["kwargs"]["tasks"] = tasks
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)

    def __or__(self, other: Any) -> Signature:  # type: ignore[override]
        if isinstance(other, _chain):
            return _chain(*self.tasks, *other.tasks, app=self._app_or_none(other))
        if isinstance(other, Signature):
            return _chain(*self.tasks, other, app=self._app_or_none(other))
        return NotImplemented

    def __repr__(self) -> str:
        return " | ".join(repr(t) for t in self.tasks) or "chain()"


class chain(_chain):
    """``chain(a.s(1), b.s(), c.s())``: ``a(1)``, then ``b(result)``, then ``c(result)``."""


class group(Signature):
    """Run tasks in parallel; the result lists their results in order."""

    def __init__(self, *tasks: Any, app: Potatoq | None = None, **options: Any) -> None:
        if len(tasks) == 1 and not isinstance(tasks[0], Mapping) and isinstance(tasks[0], Iterable):
            tasks = tuple(tasks[0])
        sigs = [maybe_signature(t, app=app) for t in tasks]
        app = app or next((getattr(t, "_app", None) for t in sigs if getattr(t, "_app", None)), None)
        Signature.__init__(self, "potatoq.group", (), {"tasks": sigs}, options, subtask_type="group", app=app)

    @property
    def tasks(self) -> list[Signature]:
        return [maybe_signature(t, app=getattr(self, "_app", None)) for t in self["kwargs"]["tasks"]]

    def clone(
        self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None, **opts: Any
    ) -> Any:
        copy = from_dict(_deepcopy(dict(self)), app=getattr(self, "_app", None))
        if args or kwargs:
            copy["kwargs"]["tasks"] = [t.clone(args, kwargs) for t in copy.tasks]
        copy.options.update(opts)
        return copy

    def freeze(self, _id: str | None = None, group_id: str | None = None, **_: Any) -> GroupResult:  # type: ignore[override]
        from .result import GroupResult

        gid = self.options.setdefault("group_id", _id or group_id or new_id())
        tasks = self.tasks
        results = [t.freeze(group_id=gid) for t in tasks]
        self["kwargs"]["tasks"] = tasks
        return GroupResult(gid, results, app=self.app)

    def fix_ids(self) -> None:
        """What :meth:`freeze` fixes (the group's and its members' ids), without building the
        result handles: sending a group needs the ids, and apply_async made the handles."""
        gid = self.options.setdefault("group_id", new_id())
        tasks = self.tasks
        for t in tasks:
            if t.subtask_type is None:
                t.options["group_id"] = gid
                t.fix_id()
            else:
                t.freeze(group_id=gid)
        self["kwargs"]["tasks"] = tasks

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)

    def skew(self, start: float = 1.0, stop: float | None = None, step: float = 1.0) -> group:
        """Spread the members' countdowns: ``start``, ``start + step`` …"""
        counter = itertools.count(start, step)
        tasks = self.tasks
        for task in tasks:
            value = next(counter)
            if stop is not None and value > stop:
                value = stop
            task.options["countdown"] = value
        self["kwargs"]["tasks"] = tasks
        return self

    def __len__(self) -> int:
        return len(self["kwargs"]["tasks"])

    def __bool__(self) -> bool:
        return True

    def __iter__(self) -> Any:
        return iter(self.tasks)

    def __repr__(self) -> str:
        return f"group([{', '.join(repr(t) for t in self.tasks)}])"


class chord(Signature):
    """``chord(header_group, body)``: run the header in parallel, then the body once with
    the header's results, in order."""

    def __init__(
        self,
        header: Any,
        body: Any = None,
        app: Potatoq | None = None,
        **options: Any,
    ) -> None:
        header_group = header if isinstance(header, group) else group(header, app=app)
        body_sig = maybe_signature(body, app=app) if body is not None else None
        app = app or getattr(header_group, "_app", None) or getattr(body_sig, "_app", None)
        Signature.__init__(
            self,
            "potatoq.chord",
            (),
            {"header": header_group, "body": body_sig},
            options,
            subtask_type="chord",
            app=app,
        )

    @property
    def header(self) -> group:
        h = self["kwargs"]["header"]
        return h if isinstance(h, group) else from_dict(h, app=getattr(self, "_app", None))  # type: ignore[return-value]

    @property
    def body(self) -> Signature | None:
        b = self["kwargs"].get("body")
        return None if b is None else maybe_signature(b, app=getattr(self, "_app", None))

    @property
    def tasks(self) -> list[Signature]:
        return self.header.tasks

    def clone(
        self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None, **opts: Any
    ) -> Any:
        copy = from_dict(_deepcopy(dict(self)), app=getattr(self, "_app", None))
        if args or kwargs:
            copy["kwargs"]["header"] = copy["kwargs"]["header"].clone(args, kwargs)
        copy.options.update(opts)
        return copy

    def freeze(self, _id: str | None = None, group_id: str | None = None, **_: Any) -> Any:
        header = self.header
        body = self.body
        if body is None:
            raise TypeError("chord has no body: call chord(header)(body) or chord(header, body)")
        header_result = header.freeze(group_id=group_id)
        result = body.freeze(_id)
        result.parent = header_result
        self["kwargs"]["header"] = header
        self["kwargs"]["body"] = body
        return result

    def __call__(self, body: Any = None, *args: Any, **kwargs: Any) -> Any:
        if body is not None and isinstance(body, Mapping):
            self["kwargs"]["body"] = maybe_signature(body, app=getattr(self, "_app", None))
            return self.apply_async(args, kwargs)
        if body is not None:
            args = (body, *args)
        return self.apply_async(args, kwargs)

    def link(self, callback: Signature) -> Signature:
        body = self.body
        assert body is not None, "chord has no body"
        body.link(callback)
        self["kwargs"]["body"] = body
        return callback

    def link_error(self, errback: Signature) -> Signature:
        body = self.body
        assert body is not None, "chord has no body"
        body.link_error(errback)
        self["kwargs"]["body"] = body
        return errback

    def __repr__(self) -> str:
        return f"chord({self.header!r}, {self.body!r})"


def xmap(task: Signature, it: Iterable[Any], app: Potatoq | None = None) -> Signature:
    """``task.map(items)``: one task running ``task(item)`` for each item, in order."""
    return Signature("potatoq.map", (), {"task": dict(task), "it": list(it)}, app=app or task.app)


def xstarmap(task: Signature, it: Iterable[Any], app: Potatoq | None = None) -> Signature:
    """``task.starmap(items)``: one task running ``task(*item)`` for each item, in order."""
    return Signature(
        "potatoq.starmap", (), {"task": dict(task), "it": [list(x) for x in it]}, app=app or task.app
    )


class chunks(Signature):
    """``task.chunks(items, n)``: the items split into ``n``-sized starmap tasks."""

    def __init__(self, task: Signature, it: Iterable[Any], n: int, app: Potatoq | None = None) -> None:
        Signature.__init__(
            self,
            "potatoq.chunks",
            (),
            {"task": dict(task), "it": [list(x) for x in it], "n": int(n)},
            subtask_type="chunks",
            app=app or task.app,
        )

    def group(self) -> group:
        task = maybe_signature(self["kwargs"]["task"], app=getattr(self, "_app", None))
        items = self["kwargs"]["it"]
        n = self["kwargs"]["n"]
        parts = [items[i : i + n] for i in range(0, len(items), n)]
        return group((xstarmap(task, part, app=getattr(self, "_app", None)) for part in parts), app=self._app)

    def apply_async(
        self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> Any:
        return self.group().apply_async(args, kwargs, **options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)


_TYPES: dict[str | None, type[Signature]] = {
    None: Signature,
    "chain": _chain,
    "group": group,
    "chord": chord,
    "chunks": chunks,
}


def from_dict(d: Mapping[str, Any], app: Potatoq | None = None) -> Signature:
    """Rebuild a signature (of the right canvas type) from its dict form."""
    kind = d.get("subtask_type")
    cls = _TYPES.get(kind, Signature)
    sig = cls.__new__(cls)
    dict.__init__(sig, d)
    sig._app = app
    kwargs = sig.get("kwargs") or {}
    if kind in ("chain", "group"):
        kwargs["tasks"] = [
            from_dict(t, app) if not isinstance(t, Signature) else t for t in kwargs.get("tasks", [])
        ]
    elif kind == "chord":
        kwargs["header"] = from_dict(kwargs["header"], app)
        if kwargs.get("body") is not None:
            kwargs["body"] = from_dict(kwargs["body"], app)
    sig["args"] = tuple(sig.get("args") or ())
    return sig


def maybe_signature(d: Any, app: Potatoq | None = None) -> Signature:
    if isinstance(d, Signature):
        if app is not None and getattr(d, "_app", None) is None:
            d._app = app
        return d
    if isinstance(d, Mapping):
        return from_dict(d, app)
    if hasattr(d, "s") and hasattr(d, "name"):  # a Task given where a signature is expected
        return d.s()  # type: ignore[no-any-return]
    raise TypeError(f"expected a signature, got {d!r}")


def signature(varies: Any, *args: Any, **kwargs: Any) -> Signature:
    """Celery's ``signature(name_or_dict, args, kwargs, **options)``."""
    if isinstance(varies, Mapping) and not args and not kwargs:
        return from_dict(varies)
    return Signature(varies, *args, **kwargs)


# ------------------------------------------------------------------------- message building

_CALL_OPTIONS = (
    "countdown",
    "eta",
    "expires",
    "priority",
    "queue",
    "routing_key",
    "concurrency_limit",
    "concurrency_key",
    "global_rate_limit",
    "rate_key",
    "rate_burst",
    "unique_key",
    "unique_for",
)


def build_messages(
    app: Potatoq,
    sig: Signature,
    *,
    prepend: tuple[Any, ...] = (),
    chain_rest: Sequence[Mapping[str, Any]] = (),
    chord_info: Mapping[str, Any] | None = None,
    parent_id: str | None = None,
    root_id: str | None = None,
    inherited: Mapping[str, Any] | None = None,
) -> list[Message]:
    """The messages that start ``sig`` (frozen: ids fixed), given what runs after it."""
    sig = maybe_signature(sig, app=app)
    kind = sig.subtask_type
    # Only the ids need fixing here, not result handles
    if kind is None:
        sig.fix_id()
    elif isinstance(sig, group):
        sig.fix_ids()
    else:
        sig.freeze()
    inherited = dict(inherited or {})
    errbacks = list(sig.options.get("link_error") or [])
    if kind == "chain":
        tasks = sig.tasks
        if not tasks:
            return []
        inherit = dict(inherited)
        if errbacks:  # a chain's errback applies to each of its tasks
            inherit["link_error"] = [*inherit.get("link_error", []), *errbacks]
        # The chain's own call options (``chain(...).apply_async(countdown=…, queue=…)``) go
        # to its first task, over that task's own, as in Celery; the rest ride unchanged.
        for key in _CALL_OPTIONS:
            if key in sig.options:
                tasks[0].options[key] = sig.options[key]
        rest = [dict(t) for t in tasks[1:]] + [dict(t) for t in chain_rest]
        links = sig.options.get("link")
        if links:
            last = tasks[-1] if len(tasks) > 1 else tasks[0]
            for cb in links:
                last.link(maybe_signature(cb, app=app))
            rest = [dict(t) for t in tasks[1:]] + [dict(t) for t in chain_rest]
        return build_messages(
            app,
            tasks[0],
            prepend=prepend,
            chain_rest=rest,
            chord_info=chord_info,
            parent_id=parent_id,
            root_id=root_id,
            inherited=inherit,
        )
    if kind == "group":
        if chain_rest:
            body_parts = [maybe_signature(t, app=app) for t in chain_rest]
            body = body_parts[0] if len(body_parts) == 1 else _chain(*body_parts, app=app)
            as_chord = chord(sig, body, app=app)
            return build_messages(
                app,
                as_chord,
                prepend=prepend,
                chord_info=chord_info,
                parent_id=parent_id,
                root_id=root_id,
                inherited=inherited,
            )
        gid = sig.options["group_id"]
        inherit = dict(inherited)
        for key in ("link", "link_error"):
            if sig.options.get(key):
                inherit[key] = [*inherit.get(key, []), *sig.options[key]]
        for key in _CALL_OPTIONS:
            if key in sig.options:
                inherit.setdefault(key, sig.options[key])
        messages: list[Message] = []
        for index, member in enumerate(sig.tasks):
            member.options.setdefault("group_id", gid)
            member.options.setdefault("group_index", index)
            messages += build_messages(
                app, member, prepend=prepend, parent_id=parent_id, root_id=root_id, inherited=inherit
            )
        return messages
    if kind == "chord":
        assert isinstance(sig, chord)
        header = sig.header
        chord_body = sig.body
        assert chord_body is not None
        body = chord_body
        if chain_rest:
            body = _chain(body, *[maybe_signature(t, app=app) for t in chain_rest], app=app)
            body.freeze()
        members = header.tasks
        gid = header.options["group_id"]
        if not members:
            return build_messages(app, body, prepend=([],), parent_id=parent_id, root_id=root_id)
        info = {"group_id": gid, "size": len(members), "body": dict(body)}
        inherit = dict(inherited)
        for key in _CALL_OPTIONS:
            if key in header.options:
                inherit.setdefault(key, header.options[key])
        messages = []
        for index, member in enumerate(members):
            member.options.setdefault("group_id", gid)
            member.options.setdefault("group_index", index)
            messages += build_messages(
                app,
                member,
                prepend=prepend,
                chord_info={**info, "index": index},
                parent_id=parent_id,
                root_id=root_id,
                inherited=inherit,
            )
        return messages
    if kind == "chunks":
        assert isinstance(sig, chunks)
        return build_messages(app, sig.group(), prepend=prepend, parent_id=parent_id, root_id=root_id)
    return [_plain_message(app, sig, prepend, chain_rest, chord_info, parent_id, root_id, inherited)]


def _plain_message(
    app: Potatoq,
    sig: Signature,
    prepend: tuple[Any, ...],
    chain_rest: Sequence[Mapping[str, Any]],
    chord_info: Mapping[str, Any] | None,
    parent_id: str | None,
    root_id: str | None,
    inherited: Mapping[str, Any],
) -> Message:
    options = {**{k: v for k, v in inherited.items() if k not in ("link", "link_error")}, **sig.options}
    args = sig.args if sig.immutable else tuple(prepend) + sig.args
    headers: dict[str, Any] = dict(options.get("headers") or {})
    links = [*inherited.get("link", []), *(sig.options.get("link") or [])]
    errbacks = [*inherited.get("link_error", []), *(sig.options.get("link_error") or [])]
    if links:
        headers["link"] = links
    if errbacks:
        headers["link_error"] = errbacks
    if chain_rest:
        headers["chain"] = [dict(t) for t in chain_rest]
    if chord_info:
        headers["chord"] = dict(chord_info)
    task_id = options["task_id"]
    headers["root_id"] = root_id or task_id
    if parent_id:
        headers["parent_id"] = parent_id
    for key in (
        "group_id",
        "group_index",
        "time_limit",
        "soft_time_limit",
        "ignore_result",
        "chord_group",
        "shadow",
    ):
        if options.get(key) is not None:
            headers[key] = options[key]
    return app.make_message(
        sig.task,
        args,
        sig.kwargs,
        task_id=task_id,
        headers=headers,
        **{k: options[k] for k in _CALL_OPTIONS if k in options},
    )


def resolve_eta(countdown: float | None, eta: dt.datetime | float | str | None) -> float | None:
    """Epoch seconds for ``countdown`` / ``eta`` (naive datetimes are UTC, as Celery's are)."""
    if eta is not None:
        if isinstance(eta, str):
            eta = dt.datetime.fromisoformat(eta)
        if isinstance(eta, dt.datetime):
            if eta.tzinfo is None:
                eta = eta.replace(tzinfo=dt.UTC)
            return eta.timestamp()
        return float(eta)
    if countdown is not None:
        return time.time() + float(countdown)
    return None


def resolve_expires(
    expires: dt.datetime | dt.timedelta | float | str | None, now: float | None = None
) -> float | None:
    """Epoch seconds for ``expires`` (seconds from now, a timedelta or a datetime)."""
    if expires is None:
        return None
    now = time.time() if now is None else now
    if isinstance(expires, str):
        expires = dt.datetime.fromisoformat(expires)
    if isinstance(expires, dt.datetime):
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=dt.UTC)
        return expires.timestamp()
    if isinstance(expires, dt.timedelta):
        return now + expires.total_seconds()
    return now + float(expires)
