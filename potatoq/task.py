"""Tasks: the ``Task`` base class, ``self.request``, ``retry`` and the calling API."""

from __future__ import annotations

import contextlib
import datetime as dt
import inspect
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic

from . import context, states
from .context import Context
from .exceptions import MaxRetriesExceededError, OperationalError, Retry
from .utils.typevars import P, R

if TYPE_CHECKING:
    from .app import Potatoq
    from .canvas import Signature
    from .result import AsyncResult


class _RequestProxy:
    """``task.request``: the context of the current run of this task (empty outside one)."""

    def __get__(self, task: Task | None, owner: type) -> Any:
        if task is None:
            return self
        top = context.current()
        if top is not None and top[0] is task:
            return top[1]
        return Context()


class Task(Generic[P, R]):
    """Base class of every task. ``@app.task`` makes a subclass with ``run`` = the function.

    Class attributes are the task's options (Celery's names); ``@app.task(option=…)``
    overrides them per task. ``None`` means "use the app setting".

    For type checkers a decorated task is ``Task[P, R]``, ``P`` and ``R`` being the
    function's parameters and return type: ``delay``, ``apply`` and a direct call check
    their arguments, and ``get()`` returns ``R``. ``apply_async``, ``s`` and ``si`` stay
    loose, as in Celery (a signature's arguments are often partial).
    """

    name: str = ""
    app: Potatoq
    typing: bool = True
    max_retries: int | None = None  # None: task_max_retries (3)
    default_retry_delay: float | None = None
    rate_limit: str | None = None  # Celery's: per worker node (potatoq.worker.ratelimit)
    concurrency_limit: int | None = None  # cluster-wide, held by the broker (potatoq.limits)
    concurrency_key: Callable[..., object] | None = None  # per-key slots: fn(*args, **kwargs)
    global_rate_limit: str | float | None = None  # "100/s": cluster-wide, held by the broker
    rate_key: Callable[..., object] | None = None  # per-key rate: fn(*args, **kwargs)
    rate_burst: int | None = None  # how many may start at once (default 1)
    unique: bool | dict[str, Any] | None = None  # one task per unique key (potatoq.unique)
    ignore_result: bool | None = None
    store_errors_even_if_ignored: bool | None = None
    time_limit: float | None = None
    soft_time_limit: float | None = None
    autoretry_for: tuple[type[BaseException], ...] = ()
    dont_autoretry_for: tuple[type[BaseException], ...] = ()
    retry_kwargs: dict[str, Any] = {}
    retry_backoff: bool | float | None = None
    retry_backoff_max: float | None = None
    retry_jitter: bool | None = None
    throws: tuple[type[BaseException], ...] = ()
    queue: str | None = None
    priority: int | None = None
    expires: float | dt.datetime | None = None
    track_started: bool | None = None
    acks_late: bool = True  # always true in potatoq; kept for Celery code that reads it
    serializer: str = "json"
    enqueue_on_commit: bool = True
    bound: bool = False
    request = _RequestProxy()

    # -- running -------------------------------------------------------------------------
    def run(self, *args: P.args, **kwargs: P.kwargs) -> R:
        raise NotImplementedError(f"task {self.name} has no run()")

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the task in this process, now (like calling the function)."""
        top = context.current()
        inside_own_run = top is not None and top[0] is self
        if inside_own_run:  # already inside this task's own context
            return self.run(*args, **kwargs)
        wrappers = self.app.direct_call_contexts
        if wrappers and self.is_async:
            coroutine: R = self._call_async_within(wrappers, args, kwargs)  # type: ignore[assignment]
            return coroutine
        token = context.push(self, Context(args=args, kwargs=kwargs, called_directly=True, task=self.name))
        try:
            with contextlib.ExitStack() as stack:
                for wrapper in wrappers:
                    stack.enter_context(wrapper())
                return self.run(*args, **kwargs)
        finally:
            context.pop(token)

    async def _call_async_within(
        self,
        wrappers: Sequence[Callable[[], contextlib.AbstractContextManager[object]]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        # The integrations' contexts must hold while the coroutine runs, not just while it
        # is created.
        token = context.push(self, Context(args=args, kwargs=kwargs, called_directly=True, task=self.name))
        try:
            with contextlib.ExitStack() as stack:
                for wrapper in wrappers:
                    stack.enter_context(wrapper())
                run: Callable[..., Any] = self.run  # an async def run: R is its coroutine
                return await run(*args, **kwargs)
        finally:
            context.pop(token)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.run)

    # -- calling -------------------------------------------------------------------------
    def delay(self, *args: P.args, **kwargs: P.kwargs) -> AsyncResult[R]:
        """Send the task with these arguments: ``apply_async(args, kwargs)``."""
        return self.apply_async(args, kwargs)

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> AsyncResult[R]:
        """``delay`` for asyncio callers: the broker call runs in a thread."""
        import asyncio

        return await asyncio.to_thread(self.apply_async, args, kwargs)

    def delay_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> AsyncResult[R]:
        """``delay`` that waits for the caller's database transaction (Django, SQLAlchemy).

        Inside a transaction the task is written in it (broker in the same database) or sent
        when it commits, and dropped if it rolls back, even for ``enqueue_on_commit = False``
        tasks; outside one it is sent now. ``delay`` does the same unless the task opted out.
        """
        return self.apply_async_on_commit(args, kwargs)

    def apply_async_on_commit(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, **options: Any
    ) -> AsyncResult[R]:
        """``apply_async`` with :meth:`delay_on_commit`'s transaction handling."""
        token = context.follow_transaction.set(True)
        try:
            return self.apply_async(args, kwargs, **options)
        finally:
            context.follow_transaction.reset(token)

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> AsyncResult[R]:
        """Send the task. Options: countdown, eta, expires, priority, queue, task_id, link,
        link_error, ignore_result, time_limit, soft_time_limit, headers, connection,
        concurrency_limit, concurrency_key, global_rate_limit, rate_key, rate_burst (see
        docs/limits.md), unique_key, unique_for (see docs/unique.md)."""
        result: AsyncResult[R] = self.signature(args, kwargs, **options).apply_async()
        return result

    def apply(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, **options: Any
    ) -> AsyncResult[R]:
        """Run the task here and now, through the serializer, returning an EagerResult."""
        result: AsyncResult[R] = self.app.apply_eagerly(self.signature(args, kwargs, **options))
        return result

    def signature(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, **options: Any
    ) -> Signature:
        from .canvas import Signature

        return Signature(self.name, args, kwargs, app=self.app, **options)

    subtask = signature

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        return self.signature(args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        return self.signature(args, kwargs, immutable=True)

    def map(self, it: Any) -> Signature:
        from .canvas import xmap

        return xmap(self.s(), it, app=self.app)

    def starmap(self, it: Any) -> Signature:
        from .canvas import xstarmap

        return xstarmap(self.s(), it, app=self.app)

    def chunks(self, it: Any, n: int) -> Signature:
        from .canvas import chunks

        return chunks(self.s(), it, n, app=self.app)

    def AsyncResult(self, task_id: str, **kwargs: Any) -> AsyncResult[R]:
        from .result import AsyncResult

        return AsyncResult(task_id, app=self.app, task_name=self.name, **kwargs)

    @property
    def backend(self) -> Any:
        return self.app.backend

    @property
    def OperationalError(self) -> type[OperationalError]:
        return OperationalError

    # -- inside a run ----------------------------------------------------------------------
    def retry(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: dt.datetime | None = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Retry:
        """Schedule this task to run again and raise :class:`Retry` (Celery's semantics).

        Past ``max_retries`` it raises ``exc`` (or :class:`MaxRetriesExceededError`). The
        retry is stored by the broker as a delayed task, never held in worker memory.
        """
        request = self.request
        if request.called_directly or request.id is None:
            # Celery: retry() outside a worker raises the exception (or Retry) at once.
            raise exc if exc is not None else Retry("task called directly, not retried", exc)
        limit = self.max_retries_for(max_retries)
        if limit is not None and request.retries >= limit:
            if exc is not None:
                raise exc
            raise MaxRetriesExceededError(
                f"Can't retry {self.name}[{request.id}] args:{request.args} kwargs:{request.kwargs}"
            )
        if eta is not None:
            when = eta.timestamp()
        else:
            delay = self.retry_delay(request.retries, countdown)
            when = time.time() + delay
        ret = Retry(exc=exc, when=when)
        ret.retry_args = None if args is None else tuple(args)  # type: ignore[attr-defined]
        ret.retry_kwargs = kwargs  # type: ignore[attr-defined]
        ret.retry_options = options  # type: ignore[attr-defined]
        if throw:
            raise ret
        return ret

    def max_retries_for(self, override: int | None = None) -> int | None:
        if override is not None:
            return override
        if "max_retries" in type(self).__dict__ or self.max_retries is not None:
            return self.max_retries
        value = self.app.conf.task_max_retries
        return None if value is None else int(value)

    def retry_delay(self, retries: int, countdown: float | None = None) -> float:
        """Seconds before retry number ``retries + 1``: explicit countdown, else backoff."""
        if countdown is not None:
            return max(0.0, float(countdown))
        if self.default_retry_delay is not None and not self.retry_backoff:
            return float(self.default_retry_delay)
        conf = self.app.conf
        backoff = self.retry_backoff if self.retry_backoff is not None else conf.task_retry_backoff
        if not backoff:
            return float(conf.task_default_retry_delay)
        factor = 1.0 if backoff is True else float(backoff)
        cap = self.retry_backoff_max if self.retry_backoff_max is not None else conf.task_retry_backoff_max
        delay = min(float(cap), factor * (2**retries))
        jitter = self.retry_jitter if self.retry_jitter is not None else conf.task_retry_jitter
        if jitter:
            # "Equal jitter": half fixed, half random, so a retry storm spreads out but a
            # retry never fires immediately.
            delay = delay / 2 + random.uniform(0, delay / 2)
        return float(delay)

    def update_state(self, task_id: str | None = None, state: str | None = None, meta: Any = None) -> None:
        """Store a custom state (e.g. ``PROGRESS``) with ``meta`` for ``get(on_message=…)``."""
        from .brokers.base import ResultRecord

        backend = self.app.backend
        task_id = task_id or self.request.id
        if backend is None or task_id is None:
            return
        backend.store_result(
            ResultRecord(task_id=task_id, state=state or states.PENDING, result=meta, name=self.name)
        )

    def get_logger(self, **_: Any) -> Any:
        """This task's logger (Celery's old ``task.get_logger()``)."""
        from .utils.log import get_task_logger

        return get_task_logger(self.name)

    def send_event(self, *args: Any, **kwargs: Any) -> None:
        """Celery's task events aren't used by potatoq; kept so code calling it runs."""

    # -- handlers, as in Celery --------------------------------------------------------------
    def before_start(self, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        pass

    def on_success(self, retval: Any, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        pass

    def on_failure(
        self, exc: BaseException, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any], einfo: Any
    ) -> None:
        pass

    def on_retry(
        self, exc: BaseException, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any], einfo: Any
    ) -> None:
        pass

    def after_return(
        self,
        status: str,
        retval: Any,
        task_id: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        einfo: Any,
    ) -> None:
        pass

    def __repr__(self) -> str:
        return f"<@task: {self.name} of {getattr(self.app, 'main', '?')}>"


def make_task_class(
    app: Potatoq,
    fun: Callable[..., Any],
    *,
    name: str,
    base: type[Task],
    bind: bool,
    options: dict[str, Any],
    runner: Callable[..., Any] | None = None,
) -> type[Task]:
    """The Task subclass for ``fun``: ``run`` calls it (or ``runner``, a wrapper of it), with
    the task first when bound."""
    call = runner or fun
    run_attr: Any
    if bind:
        if inspect.iscoroutinefunction(call):

            async def run_async(self: Task, *args: Any, **kwargs: Any) -> Any:
                return await call(self, *args, **kwargs)

            run_attr = run_async
        else:

            def run(self: Task, *args: Any, **kwargs: Any) -> Any:
                return call(self, *args, **kwargs)

            run_attr = run
    else:
        run_attr = staticmethod(call)
    attrs: dict[str, Any] = {
        "name": name,
        "app": app,
        "run": run_attr,
        "bound": bind,
        "__doc__": fun.__doc__,
        "__module__": fun.__module__,
        "__wrapped__": fun,
        "__qualname__": getattr(fun, "__qualname__", name),
        "__header__": staticmethod(fun),
    }
    for key, value in options.items():
        attrs[key] = value
    if callable(options.get("concurrency_key")):  # a plain function, never bound as a method
        attrs["concurrency_key"] = staticmethod(options["concurrency_key"])
    if callable(options.get("rate_key")):
        attrs["rate_key"] = staticmethod(options["rate_key"])
    return type(fun.__name__, (base,), attrs)
