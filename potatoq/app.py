"""The application: configuration, the task registry, routing, and the broker factory."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Concatenate, Literal, overload

from . import limits, routing, sendchecks, signals, unique
from .brokers import create_broker, scheme_of
from .brokers.base import Broker, BrokerConfig, HistorySettings
from .canvas import Signature, resolve_eta, resolve_expires
from .config import Settings, load_object
from .control import Control
from .exceptions import ImproperlyConfigured, InvalidOption, MessageTooLarge, NotRegistered, OperationalError
from .message import Message, new_id
from .pydantic_args import OPTIONS as PYDANTIC_OPTIONS
from .pydantic_args import pydantic_runner
from .result import AsyncResult as _AsyncResult
from .result import GroupResult as _GroupResult
from .task import Task as BaseTask
from .task import make_task_class
from .urls import is_rpc, normalize_url
from .utils import mask_url
from .utils.typevars import P, R

logger = logging.getLogger("potatoq")

#: See :attr:`Potatoq.publish_hooks`.
PublishHook = Callable[[Sequence[Message]], Sequence[Message]]

#: Celery transport options that potatoq always behaves as if set: accepted, never passed to
#: a broker (whose typed options would refuse them). ``confirm_publish``: every broker
#: confirms a publish before ``delay()`` returns.
ACCEPTED_TRANSPORT_OPTIONS = ("confirm_publish",)

_current: Potatoq | None = None
_shared: list[tuple[Callable[..., Any], dict[str, Any]]] = []
_all_apps: list[Potatoq] = []


def current_app() -> Potatoq:
    """The app made most recently (or a default one, as Celery's ``current_app``)."""
    global _current
    if _current is None:
        _current = Potatoq("default")
    return _current


class TaskRegistry(dict[str, BaseTask]):
    def __missing__(self, key: str) -> BaseTask:
        raise NotRegistered(key)


class AMQP:
    """``app.amqp``: what Celery code reads of it, the queues this app knows by name."""

    def __init__(self, app: Potatoq) -> None:
        self.app = app

    @property
    def queues(self) -> dict[str, QueueName]:
        """Queue name → queue: the default queue, ``task_queues`` and the tasks' own queues."""
        conf = self.app.conf
        names = [str(conf.task_default_queue)]
        for queue in conf.task_queues or ():
            name = getattr(queue, "name", queue)  # a kombu Queue, a mapping key or a name
            if isinstance(name, str):
                names.append(name)
        names += [
            task.queue for task in self.app.tasks.values() if isinstance(task.queue, str) and task.queue
        ]
        return {q: QueueName(q) for q in dict.fromkeys(routing.queue_name(n) for n in names)}


@dataclasses.dataclass(frozen=True)
class QueueName:
    """A queue in ``app.amqp.queues`` (Celery's are kombu ``Queue`` objects; only the name
    means something here: there are no exchanges)."""

    name: str


def _epoch(resolve: Callable[..., float | None], *values: Any) -> float | None:
    """``resolve(*values)``, with a number too large for a float reported as an option error."""
    try:
        return resolve(*values)
    except OverflowError:
        raise InvalidOption(f"countdown/eta/expires out of range: {values!r:.80}") from None


class Potatoq:
    """A potatoq application (also importable as ``Celery``)."""

    Task: type[BaseTask] = BaseTask

    def __init__(
        self,
        main: str | None = None,
        broker: str | None = None,
        backend: str | None = None,
        result_backend: str | None = None,
        include: Sequence[str] | None = None,
        config_source: Any = None,
        set_as_current: bool = True,
        task_cls: type[BaseTask] | str | None = None,
        namespace: str | None = None,
        **settings: Any,
    ) -> None:
        self.main = main or "__main__"
        self.conf = Settings()
        self.tasks = TaskRegistry()
        self.control = Control(self)
        self.amqp = AMQP(self)
        #: ``autodiscover_tasks()`` calls waiting for :meth:`finalize`: (packages, related_name).
        self._pending_discovery: list[tuple[Iterable[str] | Callable[[], Iterable[str]] | None, str]] = []
        #: Where ``autodiscover_tasks()`` without packages looks: set by an integration (the
        #: Django fixup lists the installed apps), as Celery's fixups do.
        self.discovery_packages: Callable[[], Iterable[str]] | None = None
        self._lock = threading.RLock()
        self._broker: Broker | None = None
        self._backend: Broker | bool | None = False  # False: not resolved yet
        self._routers: list[routing.Router] | None = None
        self._routes_source: Any = object()
        self.on_after_configure = signals.Signal("on_after_configure")
        self.on_after_finalize = signals.Signal("on_after_finalize")
        self._configured = False
        #: Transaction glue (``potatoq.contrib``): called with the messages of each send that has
        #: no explicit ``connection=``; a hook takes those it writes through the caller's open
        #: transaction (or holds until it commits) and returns the rest, which are sent now.
        self.publish_hooks: list[PublishHook] = []
        #: Integrations (``potatoq.contrib.flask``): each is entered around a direct call of a
        #: task (``task(...)``), as Celery's recipes override ``Task.__call__``. Worker and
        #: eager runs go through the ``task_prerun`` / ``task_postrun`` signals instead.
        self.direct_call_contexts: list[Callable[[], AbstractContextManager[object]]] = []
        if task_cls is not None:
            self.Task = load_object(task_cls) if isinstance(task_cls, str) else task_cls
        if config_source is not None:
            self.config_from_object(config_source, namespace=namespace)
        if broker is not None:
            self.conf.broker_url = broker
        if result_backend is not None or backend is not None:
            self.conf.result_backend = result_backend if result_backend is not None else backend
        if include:
            self.conf.include = tuple(include)
        for key, value in settings.items():
            self.conf[key] = value
        self._register_builtins()
        for fun, opts in _shared:
            self._task_from_fun(fun, **opts)
        _all_apps.append(self)
        if set_as_current:
            global _current
            _current = self
        signals.app_created.send(sender=self)

    # -- configuration ---------------------------------------------------------------------
    def config_from_object(
        self, obj: Any, namespace: str | None = None, silent: bool = False, force: bool = True
    ) -> None:
        """Read settings from a module, a dotted path, a class or a mapping."""
        if isinstance(obj, str):
            try:
                obj = load_object(obj)
            except ImportError:
                if silent:
                    return
                raise
        self.conf.update_from(obj, namespace=namespace)
        self._reset_connections()
        self._annotate_all()

    def config_from_envvar(self, variable_name: str, silent: bool = False, force: bool = False) -> None:
        import os

        path = os.environ.get(variable_name)
        if not path:
            if silent:
                return
            raise ImproperlyConfigured(f"environment variable {variable_name} is not set")
        self.config_from_object(path, silent=silent)

    def _reset_connections(self) -> None:
        with self._lock:
            self._broker = None
            self._backend = False

    def finalize(self) -> None:
        """Fire ``on_after_configure`` once and import ``include`` / ``imports`` modules."""
        if self._configured:
            return
        self._configured = True
        self.on_after_configure.send(sender=self)
        for module in (*tuple(self.conf.imports or ()), *tuple(self.conf.include or ())):
            importlib.import_module(module)
        self.discover_pending()
        # task_annotations may have been set after the tasks were defined (a config module
        # read late, app.conf.task_annotations = …): apply them to every task now.
        self._annotate_all()
        self.on_after_finalize.send(sender=self)

    def autodiscover_tasks(
        self,
        packages: Iterable[str] | Callable[[], Iterable[str]] | None = None,
        related_name: str = "tasks",
        force: bool = False,
    ) -> None:
        """Import ``<package>.tasks`` for each package (missing modules are skipped).

        A list of packages is imported now. Without one (Celery's Django layout:
        ``app.autodiscover_tasks()``) or with a callable, the packages are only known once
        the project is set up (Django's installed apps), so, as in Celery, discovery waits
        for :meth:`finalize` (a worker calls it before it starts), unless ``force=True``.
        """
        if isinstance(packages, Iterable) and not isinstance(packages, str):
            self._discover(packages, related_name)
            return
        self._pending_discovery.append((packages, related_name))
        if force or self._configured:
            self.discover_pending()

    def discover_pending(self) -> None:
        """Run the ``autodiscover_tasks()`` calls that waited for the project to be set up."""
        while self._pending_discovery:
            packages, related_name = self._pending_discovery.pop(0)
            if packages is None:
                source = self.discovery_packages
                if source is None:
                    logger.debug("autodiscover_tasks(): no integration lists packages; nothing to import")
                    continue
                packages = source
            names = packages() if callable(packages) else packages
            self._discover(names, related_name)

    def _discover(self, packages: Iterable[str], related_name: str) -> None:
        for package in packages:
            try:
                importlib.import_module(f"{package}.{related_name}")
            except ModuleNotFoundError as exc:
                if exc.name not in (f"{package}.{related_name}", package):
                    raise

    # -- command line ----------------------------------------------------------------------
    def start(self, argv: Sequence[str] | None = None) -> int:
        """Run a ``potatoq`` command with this app (Celery's ``app.start()``): ``python
        myapp.py worker -l info`` with ``app.start()`` at the end of ``myapp.py``.

        Returns the exit status (Celery's returns it too)."""
        # The command line sits on top of the app; this entry point imports it only when
        # called, as Celery's does.
        cli = importlib.import_module("potatoq.cli")
        args = list(sys.argv[1:] if argv is None else argv)
        if args and args[0] not in cli.COMMANDS and args[0].endswith(".py"):
            args = args[1:]  # Celery's examples pass sys.argv, program name included
        status: int = cli.main(args, app=self)
        return status

    def worker_main(self, argv: Sequence[str] | None = None) -> int:
        """``app.worker_main(argv=["worker", "-l", "info"])``: :meth:`start` for ``worker``."""
        args = list(sys.argv[1:] if argv is None else argv)
        if "worker" not in args:
            raise ValueError(
                "app.worker_main() needs 'worker' in argv, e.g. ['worker', '-l', 'info']; "
                "use app.start() for other commands"
            )
        return self.start(args)

    # -- tasks -----------------------------------------------------------------------------
    @overload
    def task(self, fun: Callable[P, R], /) -> BaseTask[P, R]: ...

    @overload
    def task(
        self, *, bind: Literal[True], **opts: Any
    ) -> Callable[[Callable[Concatenate[Any, P], R]], BaseTask[P, R]]: ...

    @overload
    def task(self, **opts: Any) -> Callable[[Callable[P, R]], BaseTask[P, R]]: ...

    def task(self, *args: Any, **opts: Any) -> Any:
        """``@app.task`` / ``@app.task(bind=True, name=…, queue=…, …)``.

        For type checkers the task is ``Task[P, R]``: the function's parameters (without
        ``self`` for ``bind=True``) and return type."""
        if len(args) == 1 and callable(args[0]) and not opts:
            return self._task_from_fun(args[0])

        def decorator(fun: Callable[..., Any]) -> BaseTask:
            return self._task_from_fun(fun, **opts)

        if args and callable(args[0]):
            return decorator(args[0])
        return decorator

    def _task_from_fun(
        self,
        fun: Callable[..., Any],
        name: str | None = None,
        base: type[BaseTask] | None = None,
        bind: bool = False,
        shared: bool = True,
        **options: Any,
    ) -> BaseTask:
        task_name = name or self.gen_task_name(fun.__name__, fun.__module__)
        existing = self.tasks.get(task_name)
        if existing is not None and getattr(existing, "__wrapped__", None) is fun:
            return existing
        options.pop("serializer", None) if options.get("serializer") in (None, "json") else None
        runner = fun
        validation = {key: options.pop(key) for key in PYDANTIC_OPTIONS if key in options}
        if validation.pop("pydantic", False):
            runner = pydantic_runner(
                fun,
                app=self,
                task_name=task_name,
                strict=bool(validation.get("pydantic_strict", False)),
                context=validation.get("pydantic_context"),
                dump_kwargs=validation.get("pydantic_dump_kwargs"),
            )
        cls = make_task_class(
            self, fun, name=task_name, base=base or self.Task, bind=bind, options=options, runner=runner
        )
        task: BaseTask = cls()
        self.tasks[task_name] = task
        self._annotate(task)
        return task

    def gen_task_name(self, name: str, module: str) -> str:
        if module == "__main__" and self.main:
            module = self.main
        return f"{module}.{name}"

    def register_task(self, task: BaseTask | type[BaseTask]) -> BaseTask:
        """Register a class-based task (``class MyTask(Task): name = …; def run(…)``)."""
        instance = task() if isinstance(task, type) else task
        if not instance.name:
            cls = type(instance)
            instance.name = self.gen_task_name(cls.__name__, cls.__module__)
        instance.app = self
        self.tasks[instance.name] = instance
        self._annotate(instance)
        return instance

    def _annotate_all(self) -> None:
        for task in list(self.tasks.values()):
            self._annotate(task)

    def _annotate(self, task: BaseTask) -> None:
        annotations = self.conf.task_annotations
        if not annotations:
            return
        for table in annotations if isinstance(annotations, list | tuple) else [annotations]:
            if callable(table) and not isinstance(table, Mapping):
                found = table(task)
                if found:
                    for k, v in dict(found).items():
                        setattr(task, k, v)
                continue
            for pattern in ("*", task.name):
                for k, v in dict(table.get(pattern) or {}).items():
                    setattr(task, k, v)

    def _register_builtins(self) -> None:
        from .builtins import register

        register(self)

    # -- calling ---------------------------------------------------------------------------
    def signature(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Signature:
        return Signature(name, args, kwargs, app=self, **options)

    def send_task(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> _AsyncResult:
        """Send a task by name (it needn't be registered in this process). As in Celery, the
        arguments aren't checked against the task's signature here: the worker's run is."""
        result: _AsyncResult = self.signature(
            name, args, kwargs, _check_arguments=False, **options
        ).apply_async()
        return result

    def AsyncResult(self, task_id: str, **kwargs: Any) -> _AsyncResult:
        return _AsyncResult(task_id, app=self, **kwargs)

    def GroupResult(self, group_id: str | None, results: Sequence[_AsyncResult]) -> _GroupResult:
        return _GroupResult(group_id, results, app=self)

    def add_periodic_task(
        self,
        schedule: Any,
        sig: Signature,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        **options: Any,
    ) -> str:
        """Add a ``beat_schedule`` entry (Celery's ``app.add_periodic_task``)."""
        key = name or f"{sig.task}{sig.args!r}"
        self.conf.beat_schedule = {
            **dict(self.conf.beat_schedule or {}),
            key: {
                "task": sig.task,
                "schedule": schedule,
                "args": tuple(args) or sig.args,
                "kwargs": dict(kwargs or sig.kwargs),
                "options": {**sig.options, **options},
            },
        }
        return key

    # -- messages --------------------------------------------------------------------------
    def routers(self) -> list[routing.Router]:
        source = self.conf.task_routes
        if self._routers is None or source is not self._routes_source:
            self._routers = routing.prepare(source)
            self._routes_source = source
        return self._routers

    def make_message(
        self,
        task_name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        task_id: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        countdown: float | None = None,
        eta: Any = None,
        expires: Any = None,
        headers: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        retries: int = 0,
        concurrency_limit: int | None = None,
        concurrency_key: str | None = None,
        global_rate_limit: str | float | None = None,
        rate_key: str | None = None,
        rate_burst: int | None = None,
        unique_key: str | None = None,
        unique_for: float | None = None,
        **_: Any,
    ) -> Message:
        """The message for one call: routing, defaults and argument checks applied."""
        args = tuple(args)
        kwargs = dict(kwargs or {})
        task = self.tasks.get(task_name)
        explicit = {k: v for k, v in (("queue", queue), ("priority", priority)) if v is not None}
        if task is not None:
            if task.queue and "queue" not in explicit:
                explicit["queue"] = task.queue
            if task.priority is not None and "priority" not in explicit:
                explicit["priority"] = task.priority
            if expires is None and task.expires is not None:
                expires = task.expires
        route = (
            routing.route(self.routers(), task_name, args, kwargs, explicit, task) if self.routers() else {}
        )
        final_queue = (
            explicit.get("queue") or route.get("queue") or routing_key or self.conf.task_default_queue
        )
        final_priority = explicit.get("priority", route.get("priority", self.conf.task_default_priority))
        final_queue = routing.queue_name(str(final_queue))
        headers = dict(headers or {})
        limited = limits.limit_header(
            self.conf,
            task,
            task_name,
            args,
            kwargs,
            {"concurrency_limit": concurrency_limit, "concurrency_key": concurrency_key},
            final_queue,
        )
        if limited is not None:
            headers[limits.HEADER] = limited
        rated = limits.rate_header(
            self.conf,
            task,
            task_name,
            args,
            kwargs,
            {"global_rate_limit": global_rate_limit, "rate_key": rate_key, "rate_burst": rate_burst},
        )
        if rated is not None:
            headers[limits.RATE_HEADER] = rated
        held = unique.unique_header(
            task, task_name, args, kwargs, {"unique_key": unique_key, "unique_for": unique_for}
        )
        if held is not None:
            headers[unique.HEADER] = held
        return Message(
            id=task_id or new_id(),
            task=sendchecks.check_task_name(task_name),
            args=args,
            kwargs=kwargs,
            queue=final_queue,
            priority=sendchecks.check_priority(int(final_priority or 0)),
            eta=sendchecks.check_moment(_epoch(resolve_eta, countdown, eta), "countdown/eta"),
            expires=sendchecks.check_moment(_epoch(resolve_expires, expires), "expires"),
            retries=retries,
            headers={"sent_at": time.time(), **headers},  # task history: enqueue-to-start
        )

    def apply_eagerly(self, sig: Signature) -> Any:
        """Run ``sig`` here and now through a private in-memory broker (``task.apply()``,
        ``task_always_eager``); tasks and signatures reach the eager runner through this."""
        from .eager import apply_eagerly  # the in-memory broker, loaded by the first eager run

        return apply_eagerly(self, sig)

    def send_messages(
        self,
        messages: Sequence[Message],
        *,
        connection: Any = None,
        use_hooks: bool = True,
        retry: bool | None = None,
        retry_policy: Mapping[str, Any] | None = None,
    ) -> None:
        """Enqueue messages, retrying connection errors.

        Without ``connection``, :attr:`publish_hooks` may take some messages first (to write
        them in the caller's transaction or send them when it commits); ``use_hooks=False``
        is how a hook finally sends what it held.

        By default connection errors are retried with backoff until
        ``broker_connection_timeout``; then :class:`OperationalError` is raised (Celery's
        ``add.OperationalError``). ``retry=False`` (or ``task_publish_retry=False``) tries
        once; a ``retry_policy`` (Celery's keys: ``max_retries``, ``interval_start``,
        ``interval_step``, ``interval_max``) counts retries instead of watching the clock.
        """
        if not messages:
            return
        limit = self.conf.task_max_message_size
        for message in messages:
            if limit and len(message.encode()) > limit:
                raise MessageTooLarge(
                    f"message for task {message.task!r} is {len(message.encode())} bytes; "
                    f"task_max_message_size is {limit}"
                )
            if limits.HEADER in message.headers and not self.broker.capabilities.concurrency_limits:
                raise ImproperlyConfigured(
                    f"task {message.task!r} has a concurrency limit, but {type(self.broker).__name__} "
                    "doesn't enforce concurrency limits (see docs/limits.md)"
                )
            if limits.RATE_HEADER in message.headers and not self.broker.capabilities.rate_limits:
                raise ImproperlyConfigured(
                    f"task {message.task!r} has a global rate limit, but {type(self.broker).__name__} "
                    "doesn't enforce global rate limits (see docs/limits.md)"
                )
            if unique.HEADER in message.headers and not self.broker.capabilities.unique_tasks:
                raise ImproperlyConfigured(
                    f"task {message.task!r} is unique, but {type(self.broker).__name__} doesn't "
                    "support unique tasks yet: they need a broker that holds the key with the task "
                    "(SQLite, PostgreSQL, Redis/Valkey or memory; see docs/unique.md)"
                )
        if connection is None and use_hooks:
            for hook in list(self.publish_hooks):
                messages = hook(messages)
                if not messages:
                    return
        if signals.before_task_publish.receivers:
            for message in messages:
                signals.before_task_publish.send(sender=message.task, body=message, headers=message.headers)
                message.forget_encoding()  # a receiver may have changed the headers
        if retry is None:
            retry = bool(self.conf.task_publish_retry)
        policy = retry_policy if retry_policy is not None else self.conf.get("task_publish_retry_policy")
        attempts = _publish_attempts(
            retry and connection is None, policy, float(self.conf.broker_connection_timeout)
        )
        for delay in attempts:
            try:
                self.broker.enqueue(messages, connection=connection)
                break
            except self.broker.connection_errors as exc:
                if delay is None:
                    raise OperationalError(
                        f"can't reach the broker at {mask_url(self.conf.broker_url_or_default())}: {exc}"
                    ) from exc
                time.sleep(delay)
        for message in messages:
            signals.after_task_publish.send(sender=message.task, body=message, headers=message.headers)

    # -- broker and results -------------------------------------------------------------------
    def broker_config(
        self, url: str | None = None, result_backend: Broker | None = None, *, for_results: bool = False
    ) -> BrokerConfig:
        conf = self.conf
        options = dict(
            (conf.result_backend_transport_options if for_results else conf.broker_transport_options) or {}
        )
        for name in ACCEPTED_TRANSPORT_OPTIONS:
            options.pop(name, None)
        return BrokerConfig(
            url=normalize_url(url or conf.broker_url_or_default()),
            transport_options=options,
            result_expires=_seconds(conf.result_expires),
            max_deliveries=int(conf.task_max_deliveries),
            dead_letter_max=int(conf.dead_letter_max),
            dead_letter_ttl=float(conf.dead_letter_ttl),
            dead_after=float(conf.worker_dead_after),
            connection_timeout=float(conf.broker_connection_timeout),
            task_time_limit=float(conf.task_time_limit or 1800),
            max_message_size=int(conf.task_max_message_size) if conf.task_max_message_size else None,
            result_backend=result_backend,
            history=HistorySettings.from_settings(conf),
            prefetch_multiplier=_prefetch_multiplier(conf),
        )

    @property
    def broker(self) -> Broker:
        """The broker (made on first use; brokers keep per-process connections)."""
        broker = self._broker
        if broker is None:
            with self._lock:
                if self._broker is None:
                    self._broker = self._make_broker()
                broker = self._broker
        return broker

    def _make_broker(self) -> Broker:
        url = normalize_url(self.conf.broker_url_or_default())
        separate = self._separate_backend_url()
        backend = None
        if separate is not None:
            backend = create_broker(self.broker_config(separate, for_results=True), role="result backend")
            self._backend = backend
        broker = create_broker(self.broker_config(url, result_backend=backend))
        if is_rpc(self.conf.result_backend_or_env()) and not broker.capabilities.stores_results:
            broker.close()
            raise ImproperlyConfigured(
                f"result_backend={self.conf.result_backend_or_env()!r} stores results in the broker, and the "
                f"{scheme_of(url)}:// broker can't: set result_backend to a sqlite:///, postgresql:// "
                "or redis:// URL (or None to store no results)"
            )
        return broker

    def _separate_backend_url(self) -> str | None:
        value = self._result_backend_setting()
        if not value or value in ("broker", "disabled", "none"):
            return None
        url = normalize_url(str(value))
        if url == normalize_url(self.conf.broker_url_or_default()):
            return None
        return url

    def _result_backend_setting(self) -> Any:
        """``result_backend`` (the environment's first) with Celery's ``rpc://`` read as ``"broker"``.

        Celery's RPC backend sends results back through the broker; potatoq stores them in
        the broker (as a record, readable by any process, not only the caller), which is
        what a guide example written for ``backend='rpc://'`` needs. A broker that stores no
        results (RabbitMQ) refuses it when it is made (:meth:`_make_broker`), rather than
        leaving every ``get()`` and chord without results.
        """
        value = self.conf.result_backend_or_env()
        if is_rpc(value):
            return "broker"
        return value

    @property
    def backend(self) -> Broker | None:
        """Where results are stored: the broker itself, a separate store, or None."""
        backend = self._backend
        if backend is False:
            with self._lock:
                broker = self.broker
                if self._backend is False:
                    value = self._result_backend_setting()
                    if value in ("disabled", "none"):
                        self._backend = None
                    elif value == "broker" or (value and self._separate_backend_url() is None):
                        self._backend = broker if broker.capabilities.stores_results else None
                    elif value:
                        self._backend = broker.config.result_backend
                    else:
                        self._backend = broker if broker.capabilities.results_by_default else None
                backend = self._backend
        return backend  # type: ignore[return-value]

    @property
    def results_in_broker(self) -> bool:
        """True when results are written in the same atomic step as the task's settle."""
        return self.backend is not None and self.backend is self.broker

    def connection_for_write(self) -> Broker:
        return self.broker

    def close(self) -> None:
        with self._lock:
            if self._broker is not None:
                self._broker.close()
            if self._backend not in (False, None) and self._backend is not self._broker:
                self._backend.close()  # type: ignore[union-attr]
            self._broker = None
            self._backend = False

    def __repr__(self) -> str:
        return f"<Potatoq {self.main} broker={mask_url(self.conf.broker_url_or_default())}>"


Celery = Potatoq


def _publish_attempts(
    retry: bool, policy: Mapping[str, Any] | None, timeout: float
) -> Iterable[float | None]:
    """The pause after each failed publish attempt; None after the last one (give up)."""
    if not retry:
        yield None
        return
    if policy:
        tries = policy.get("max_retries", 3)
        step = float(policy.get("interval_step", 0.2))
        cap = float(policy.get("interval_max", 1.0))
        pause = float(policy.get("interval_start", 0.0))
        count = 0
        while tries is None or count < int(tries):
            yield min(pause, cap)
            pause += step
            count += 1
        yield None
        return
    deadline = time.monotonic() + timeout
    pause = 0.05
    while (left := deadline - time.monotonic()) > 0:
        yield min(pause, left)  # the last attempt is made at the deadline
        pause = min(pause * 2, 1.0)
    yield None


def _prefetch_multiplier(conf: Any) -> int:
    """``worker_prefetch_multiplier`` when the project set it, else 1: Celery's default of 4
    (what the setting reads as until set) would let long tasks wait behind each other."""
    if "worker_prefetch_multiplier" not in conf.changes():
        return 1
    value = conf.worker_prefetch_multiplier
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(
            f"worker_prefetch_multiplier must be a whole number, not {value!r}"
        ) from None


def _seconds(value: Any) -> float:
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    return float(value)


@overload
def shared_task(fun: Callable[P, R], /) -> BaseTask[P, R]: ...


@overload
def shared_task(
    *, bind: Literal[True], **opts: Any
) -> Callable[[Callable[Concatenate[Any, P], R]], BaseTask[P, R]]: ...


@overload
def shared_task(**opts: Any) -> Callable[[Callable[P, R]], BaseTask[P, R]]: ...


def shared_task(*args: Any, **opts: Any) -> Any:
    """``@shared_task``: a task registered on every app (made before or after it)."""

    def decorator(fun: Callable[..., Any]) -> Any:
        _shared.append((fun, opts))
        for app in _all_apps:
            app._task_from_fun(fun, **opts)
        return _SharedTaskProxy(fun, opts)

    if len(args) == 1 and callable(args[0]) and not opts:
        return decorator(args[0])
    return decorator


class _SharedTaskProxy:
    """Resolves to the task registered on the current app."""

    def __init__(self, fun: Callable[..., Any], opts: dict[str, Any]) -> None:
        self._fun = fun
        self._opts = opts
        self.__wrapped__ = fun
        self.__doc__ = fun.__doc__
        self.__name__ = fun.__name__

    def _task(self) -> BaseTask:
        return current_app()._task_from_fun(self._fun, **self._opts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task(), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._task()(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self._task())
