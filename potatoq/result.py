"""Result handles: ``AsyncResult``, ``GroupResult`` and ``EagerResult``."""

from __future__ import annotations

import builtins
import collections
import contextlib
import contextvars
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, overload

from . import context, states
from .brokers.base import ResultRecord
from .exceptions import ResultNotStored, TimeoutError  # noqa: A004 - Celery's name
from .utils.typevars import R, T

if TYPE_CHECKING:
    from .app import Potatoq
    from .brokers.base import Broker


# ------------------------------------------------------------------------- exceptions as data


def encode_exception(exc: BaseException) -> dict[str, Any]:
    """An exception as JSON data (never pickle)."""
    from .serialization import dumps

    args: list[Any] = []
    # Some exceptions keep their message out of args (pydantic's ValidationError): keep it.
    for a in exc.args or ([str(exc)] if str(exc) else []):
        try:
            dumps(a)
            args.append(a)
        except TypeError:
            args.append(repr(a))
    cls = type(exc)
    return {"exc_type": cls.__qualname__, "exc_message": args, "exc_module": cls.__module__}


_created: dict[tuple[str, str], type[Exception]] = {}


def decode_exception(data: Any) -> BaseException:
    """Rebuild an exception from :func:`encode_exception` data.

    Only classes that are already imported (builtins, potatoq, the user's modules) are
    instantiated; an unknown one becomes a stand-in ``Exception`` subclass of that name, so
    ``except`` by name in logs still reads right and no code is loaded because of a result.
    """
    if isinstance(data, BaseException):
        return data
    if not isinstance(data, dict) or "exc_type" not in data:
        return Exception(data)
    name = str(data.get("exc_type"))
    module_name = str(data.get("exc_module") or "builtins")
    message = data.get("exc_message")
    args = tuple(message) if isinstance(message, list | tuple) else (message,)
    cls: Any = None
    module = builtins if module_name == "builtins" else sys.modules.get(module_name)
    if module is not None:
        cls = module
        for part in name.split("."):
            cls = getattr(cls, part, None)
            if cls is None:
                break
    if isinstance(cls, type) and issubclass(cls, BaseException):
        try:
            exc: BaseException = cls(*args)
            return exc
        except Exception:  # noqa: BLE001 - its __init__ wants other arguments: a stand-in
            pass
    return _stand_in(module_name, name)(*args)


def _stand_in(module_name: str, name: str) -> type[Exception]:
    """An ``Exception`` subclass named like a class that can't be rebuilt here."""
    key = (module_name, name)
    cls = _created.get(key)
    if cls is None:
        cls = type(name.rsplit(".", 1)[-1], (Exception,), {"__module__": module_name})
        _created[key] = cls
    return cls


# ------------------------------------------------------------------------- joining in a task

_join_allowed: contextvars.ContextVar[bool] = contextvars.ContextVar("potatoq_join_allowed", default=False)


@contextlib.contextmanager
def allow_join_result() -> Iterator[None]:
    """Let ``get()`` wait inside a task (Celery's ``allow_join_result``): for errbacks that
    look a failure up by id. Waiting on another task from a task can exhaust the pool."""
    token = _join_allowed.set(True)
    try:
        yield
    finally:
        _join_allowed.reset(token)


@contextlib.contextmanager
def denied_join_result() -> Iterator[None]:
    token = _join_allowed.set(False)
    try:
        yield
    finally:
        _join_allowed.reset(token)


def _refuse_sync_subtask() -> None:
    if context.in_task() and not _join_allowed.get():
        raise RuntimeError(
            "Never call result.get() within a task! It can deadlock the worker; "
            "use a chain or chord, or pass disable_sync_subtasks=False"
        )


# ------------------------------------------------------------------------- AsyncResult


class AsyncResult(Generic[R]):
    """The handle of a sent task: its state and, once ready, its return value.

    ``AsyncResult[R]`` for type checkers: ``get()`` returns ``R`` (the task function's
    return type; for an ``async def`` task, what its coroutine returns)."""

    def __init__(
        self,
        id: str,  # noqa: A002 - Celery's name
        app: Potatoq | None = None,
        task_name: str | None = None,
        parent: AsyncResult | GroupResult | None = None,
        ignored: bool = False,
        backend: Broker | None = None,
    ) -> None:
        if app is None:
            from .app import current_app

            app = current_app()
        self.id = self.task_id = id
        self.app = app
        self.task_name = task_name
        self.parent = parent
        self.ignored = ignored
        self._backend = backend
        self._cache: ResultRecord | None = None

    # -- where the state lives ------------------------------------------------------------
    @property
    def backend(self) -> Broker | None:
        return self._backend if self._backend is not None else self.app.backend

    def _record(self) -> ResultRecord | None:
        if self._cache is not None:
            return self._cache
        backend = self.backend
        if backend is None:
            return None
        record = backend.get_result(self.id)
        if record is not None and record.state in states.READY_STATES:
            self._cache = record
        return record

    # -- state ---------------------------------------------------------------------------
    @property
    def state(self) -> str:
        record = self._record()
        return record.state if record is not None else states.PENDING

    status = state

    def ready(self) -> bool:
        return self.state in states.READY_STATES

    def successful(self) -> bool:
        return self.state == states.SUCCESS

    def failed(self) -> bool:
        return self.state == states.FAILURE

    @property
    def result(self) -> Any:
        record = self._record()
        return None if record is None else _value(record)

    info = result

    @property
    def traceback(self) -> str | None:
        record = self._record()
        return None if record is None else record.traceback

    @property
    def date_done(self) -> float | None:
        record = self._record()
        return None if record is None else record.date_done

    @property
    def name(self) -> str | None:
        record = self._record()
        return (record.name if record is not None else None) or self.task_name

    @property
    def retries(self) -> int:
        record = self._record()
        return 0 if record is None else record.retries

    @property
    def args(self) -> tuple[Any, ...] | None:
        record = self._record()
        return None if record is None else record.args

    @property
    def kwargs(self) -> Any:
        record = self._record()
        return None if record is None else record.kwargs

    @property
    def children(self) -> list[AsyncResult]:
        record = self._record()
        if record is None:
            return []
        return [AsyncResult(c, app=self.app, parent=self) for c in record.children]

    # -- waiting -------------------------------------------------------------------------
    @overload
    def get(
        self: AsyncResult[Coroutine[Any, Any, T]],
        timeout: float | None = None,
        propagate: bool = True,
        interval: float = 0.5,
        no_ack: bool = True,
        follow_parents: bool = True,
        callback: Callable[[str, Any], Any] | None = None,
        on_message: Callable[[dict[str, Any]], Any] | None = None,
        on_interval: Callable[[], Any] | None = None,
        disable_sync_subtasks: bool = True,
        **_: Any,
    ) -> T: ...

    @overload
    def get(
        self: AsyncResult[T],
        timeout: float | None = None,
        propagate: bool = True,
        interval: float = 0.5,
        no_ack: bool = True,
        follow_parents: bool = True,
        callback: Callable[[str, Any], Any] | None = None,
        on_message: Callable[[dict[str, Any]], Any] | None = None,
        on_interval: Callable[[], Any] | None = None,
        disable_sync_subtasks: bool = True,
        **_: Any,
    ) -> T: ...

    def get(
        self,
        timeout: float | None = None,
        propagate: bool = True,
        interval: float = 0.5,
        no_ack: bool = True,
        follow_parents: bool = True,
        callback: Callable[[str, Any], Any] | None = None,
        on_message: Callable[[dict[str, Any]], Any] | None = None,
        on_interval: Callable[[], Any] | None = None,
        disable_sync_subtasks: bool = True,
        **_: Any,
    ) -> Any:
        """Wait for the task and return its value (raise its exception with ``propagate``)."""
        if self.ignored:
            return None
        if disable_sync_subtasks:
            _refuse_sync_subtask()
        backend = self.backend
        if backend is None:
            raise ResultNotStored(
                f"task {self.id} has no stored result: this app has no result backend "
                "(set result_backend, e.g. result_backend='broker' on Redis)"
            )
        # Celery re-checks the parents on every poll interval: a chain whose middle step
        # failed raises that step's exception then, instead of waiting for a last step
        # that will never run.
        watch_parents = follow_parents and propagate and isinstance(self.parent, AsyncResult)
        if watch_parents:
            self._raise_if_parent_failed()
        record = self._wait(
            backend,
            timeout,
            on_message,
            on_interval,
            every_interval=self._raise_if_parent_failed if watch_parents else None,
            interval=interval,
        )
        if record is None or record.state not in states.READY_STATES:
            raise TimeoutError("The operation timed out.")
        self._cache = record
        if callback is not None:
            callback(self.id, _value(record))
        if record.state in states.PROPAGATE_STATES and propagate:
            raise _value(record)
        return _value(record)

    wait = get

    def _raise_if_failed(self) -> None:
        record = self._record()
        if record is not None and record.state in states.PROPAGATE_STATES:
            raise _value(record)

    def _raise_if_parent_failed(self) -> None:
        """Raise the exception of the earliest failed parent (Celery walks from the root).

        Only the chain's single-task parents: a chord's header group fails its body with a
        ``ChordError``, which the body's own result reports."""
        ancestors: list[AsyncResult] = []
        node = self.parent
        while isinstance(node, AsyncResult):
            ancestors.append(node)
            node = node.parent
        for ancestor in reversed(ancestors):
            ancestor._raise_if_failed()

    def _wait(
        self,
        backend: Broker,
        timeout: float | None,
        on_message: Callable[[dict[str, Any]], Any] | None,
        on_interval: Callable[[], Any] | None,
        *,
        every_interval: Callable[[], None] | None = None,
        interval: float = 0.5,
    ) -> ResultRecord | None:
        if on_message is None and on_interval is None:
            if every_interval is None:
                return backend.wait_for_result(self.id, timeout)
            return self._wait_in_slices(backend, timeout, every_interval, max(interval, 0.01))
        # Progress updates: watch the stored state change (custom states included).
        deadline = None if timeout is None else time.monotonic() + timeout
        last: tuple[str, Any] | None = None
        delay = 0.005
        while True:
            record = backend.get_result(self.id)
            if record is not None and on_message is not None and (record.state, record.result) != last:
                last = (record.state, record.result)
                on_message(
                    {
                        "task_id": self.id,
                        "status": record.state,
                        "result": _value(record),
                        "traceback": record.traceback,
                        "children": list(record.children),
                    }
                )
            if record is not None and record.state in states.READY_STATES:
                return record
            if on_interval is not None:
                on_interval()
            if every_interval is not None:
                every_interval()
            if deadline is not None and time.monotonic() >= deadline:
                return record
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _wait_in_slices(
        self, backend: Broker, timeout: float | None, every_interval: Callable[[], None], interval: float
    ) -> ResultRecord | None:
        """The broker's own wait, ``interval`` at a time, calling ``every_interval`` between."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
            record = backend.wait_for_result(self.id, remaining)
            if record is not None and record.state in states.READY_STATES:
                return record
            every_interval()
            if deadline is not None and time.monotonic() >= deadline:
                return record

    @overload
    async def aget(
        self: AsyncResult[Coroutine[Any, Any, T]],
        timeout: float | None = None,
        propagate: bool = True,
        **kwargs: Any,
    ) -> T: ...

    @overload
    async def aget(
        self: AsyncResult[T], timeout: float | None = None, propagate: bool = True, **kwargs: Any
    ) -> T: ...

    async def aget(self, timeout: float | None = None, propagate: bool = True, **kwargs: Any) -> Any:
        """``get`` for asyncio callers: waits in a thread, never blocking the event loop."""
        import asyncio  # here, not at the top: a worker that runs no coroutine never loads it

        return await asyncio.to_thread(self.get, timeout, propagate, **kwargs)

    def collect(self, intermediate: bool = False, **kwargs: Any) -> Iterator[tuple[AsyncResult, Any]]:
        """Yield ``(result, value)`` for this task and its children, breadth first (Celery's
        order). Each value is waited for with ``get(**kwargs)``; with ``intermediate=True`` a
        node that isn't ready yet is skipped instead of waited for."""
        stack: collections.deque[AsyncResult] = collections.deque([self])
        while stack:
            node = stack.popleft()
            if intermediate and not node.ready():
                continue
            yield node, node.get(**kwargs)
            stack.extend(node.children)

    def then(self, callback: Callable[[AsyncResult], Any], **_: Any) -> None:
        callback(self)

    # -- control -------------------------------------------------------------------------
    def revoke(self, connection: Any = None, terminate: bool = False, signal: Any = None, **_: Any) -> None:
        """Stop the task from running if it hasn't started (its state becomes REVOKED); with
        ``terminate=True`` also if it is running: its process gets ``signal`` (SIGTERM)."""
        self.app.control.revoke(self.id, terminate=terminate, signal=signal)

    def forget(self) -> None:
        backend = self.backend
        self._cache = None
        if backend is not None:
            backend.forget_result(self.id)

    def as_tuple(self) -> tuple[Any, ...]:
        parent = self.parent.as_tuple() if isinstance(self.parent, AsyncResult) else None
        return ((self.id, parent), None)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AsyncResult):
            return other.id == self.id
        if isinstance(other, str):
            return other == self.id
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.id)

    def __str__(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.id}>"


def _value(record: ResultRecord) -> Any:
    if record.state in states.EXCEPTION_STATES:
        return decode_exception(record.result)
    return record.result


class EagerResult(AsyncResult):
    """The result of a task run in this process (``apply()``, ``task_always_eager``)."""

    def __init__(self, id: str, app: Potatoq, record: ResultRecord | None, **kwargs: Any) -> None:  # noqa: A002
        super().__init__(id, app=app, **kwargs)
        self._eager_record = record
        self._cache = record

    def _record(self) -> ResultRecord | None:
        return self._eager_record

    def get(self, timeout: float | None = None, propagate: bool = True, *args: Any, **kwargs: Any) -> Any:
        record = self._eager_record
        if record is None:
            return None
        if record.state in states.PROPAGATE_STATES and propagate:
            raise _value(record)
        return _value(record)

    wait = get


class GroupResult:
    """The results of a group, in the order of its tasks."""

    def __init__(
        self,
        id: str | None = None,  # noqa: A002
        results: Sequence[AsyncResult] = (),
        app: Potatoq | None = None,
        parent: AsyncResult | None = None,
    ) -> None:
        self.id = id
        self.results = list(results)
        self.app = app
        self.parent = parent

    @property
    def children(self) -> list[AsyncResult]:
        return self.results

    def __iter__(self) -> Iterator[AsyncResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> AsyncResult:
        return self.results[index]

    def ready(self) -> bool:
        return all(r.ready() for r in self.results)

    def successful(self) -> bool:
        return all(r.successful() for r in self.results)

    def failed(self) -> bool:
        return any(r.failed() for r in self.results)

    def waiting(self) -> bool:
        return not self.ready()

    def completed_count(self) -> int:
        return sum(1 for r in self.results if r.successful())

    def get(self, timeout: float | None = None, propagate: bool = True, **kwargs: Any) -> list[Any]:
        """Every member's value, in order (one shared ``timeout`` for the whole group)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for r in self.results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            values.append(r.get(timeout=remaining, propagate=propagate, **kwargs))
        return values

    join = join_native = get

    async def aget(self, timeout: float | None = None, propagate: bool = True) -> list[Any]:
        import asyncio

        return await asyncio.to_thread(self.get, timeout, propagate)

    def revoke(self, **kwargs: Any) -> None:
        for r in self.results:
            r.revoke(**kwargs)

    def forget(self) -> None:
        for r in self.results:
            r.forget()

    def save(self, backend: Any = None) -> GroupResult:
        return self

    def __repr__(self) -> str:
        return f"<GroupResult: {self.id} [{', '.join(r.id for r in self.results)}]>"


ResultSet = GroupResult
