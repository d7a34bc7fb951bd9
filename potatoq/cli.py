"""The ``potatoq`` command: ``potatoq [-A APP] [-b URL] COMMAND [options]``.

Each command is one function registered with :func:`command`, with its options added by
a small ``arguments`` function. Adding a command is adding those two functions::

    def _purge_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-Q", "--queues", action="append", required=True)

    @command("purge", "delete waiting tasks", arguments=_purge_arguments)
    def cmd_purge(ctx: CommandContext) -> int:
        ctx.print(f"{ctx.app.broker.purge(split_queues(ctx.args.queues))} tasks deleted")
        return 0

Errors a user can fix (a wrong ``-A`` path, a bad option value, an unknown broker URL) are
one line on stderr and exit status 2; nothing here touches the root logger unless asked
(``worker_hijack_root_logger``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.machinery
import importlib.util
import inspect
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from potatoq import cli_ops
from potatoq.dashboard.cli import register as register_dashboard
from potatoq.exceptions import ImproperlyConfigured, OperationalError
from potatoq.urls import client_error
from potatoq.utils import scrub

__all__ = ["COMMANDS", "CommandContext", "UsageError", "command", "find_app", "main", "split_queues"]

APP_ATTRIBUTES = ("app", "potatoq", "celery")
APP_SUBMODULES = ("potatoq", "celery", "app", "tasks")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
DEFAULT_LOG_LEVEL = "warning"


class UsageError(Exception):
    """Something the user can fix; printed as one line, exit status 2."""


# ----------------------------------------------------------------------------- finding the app


def _is_app(value: Any) -> bool:
    from potatoq.app import Potatoq

    return isinstance(value, Potatoq)


def _import(name: str) -> Any:
    """Import ``name``; a UsageError when that module (not something it imports) is missing."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (name == missing or name.startswith(missing + ".")):
            raise UsageError(
                f"can't import {name!r}: no module named {missing!r} (is it on sys.path?)"
            ) from None
        raise


def _app_in_module(module: Any) -> Any | None:
    for attr in APP_ATTRIBUTES:
        value = getattr(module, attr, None)
        if _is_app(value):
            return value
    return None


def find_app(spec: str) -> Any:
    """The app named by ``-A``: ``proj``, ``proj.module`` or ``proj.module:attr``.

    Without ``:attr`` the module's ``app``, ``potatoq`` or ``celery`` attribute is used; for
    a package, its ``potatoq``/``celery``/``app``/``tasks`` submodules are tried too.
    ``proj.module.attr`` (an attribute, not a module) works as in Celery.
    """
    spec = spec.strip()
    if not spec:
        raise UsageError("-A/--app is empty")
    if ":" in spec:
        module_name, _, attr_path = spec.partition(":")
        value = _import(module_name)
        for part in attr_path.split("."):
            try:
                value = getattr(value, part)
            except AttributeError:
                raise UsageError(f"module {module_name!r} has no attribute {attr_path!r}") from None
        if inspect.isfunction(value):
            value = value()  # an app factory: def create_app() -> Potatoq
        if not _is_app(value):
            raise UsageError(f"{spec!r} is a {type(value).__name__}, not a potatoq app")
        return value
    try:
        module = _import(spec)
    except UsageError:
        parent, _, attr = spec.rpartition(".")
        if not parent:
            raise
        try:
            value = getattr(_import(parent), attr, None)
        except UsageError:
            value = None
        if _is_app(value):
            return value
        raise
    found = _app_in_module(module)
    if found is not None:
        return found
    if hasattr(module, "__path__"):  # a package: look in the usual submodules
        for sub in APP_SUBMODULES:
            try:
                submodule = importlib.import_module(f"{spec}.{sub}")
            except ModuleNotFoundError as exc:
                if exc.name == f"{spec}.{sub}":
                    continue
                raise
            found = _app_in_module(submodule)
            if found is not None:
                return found
    names = "/".join(APP_ATTRIBUTES)
    raise UsageError(f"no potatoq app found in {spec!r}: define {names} there, or pass -A {spec}:name")


# ----------------------------------------------------------------------------- commands


@dataclasses.dataclass
class CommandContext:
    """What a command gets: the parsed options and the app, loaded on first use."""

    args: argparse.Namespace
    out: TextIO = dataclasses.field(default_factory=lambda: sys.stdout)
    _app: Any = None

    #: The app a caller gave (``app.start()``); ``-b`` and the Django fixup still apply to it.
    given_app: Any = None

    @property
    def app(self) -> Any:
        if self._app is None:
            self._app = load_app(self.args, self.given_app)
        return self._app

    def print(self, *parts: Any) -> None:
        print(*parts, file=self.out, flush=True)

    def urls(self) -> list[str]:
        """Every broker/backend URL this command may have used: their passwords are scrubbed
        from error messages (see :func:`potatoq.utils.scrub`)."""
        found = [getattr(self.args, "broker", None), getattr(self.args, "result_backend", None)]
        found.append(os.environ.get("POTATOQ_BROKER_URL"))
        if self._app is not None:
            found.append(self._app.conf.broker_url_or_default())
            backend = self._app.conf.get("result_backend")
            found.append(backend if isinstance(backend, str) else None)
        return [url for url in found if url]


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    help: str
    run: Callable[[CommandContext], int]
    arguments: Callable[[argparse.ArgumentParser], None] | None = None


COMMANDS: dict[str, Command] = {}


def command(
    name: str,
    help: str,  # noqa: A002 - argparse's word for it
    *,
    arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> Callable[[Callable[[CommandContext], int]], Callable[[CommandContext], int]]:
    """Register ``potatoq NAME``: the decorated function returns the exit status."""

    def register(fn: Callable[[CommandContext], int]) -> Callable[[CommandContext], int]:
        COMMANDS[name] = Command(name, help, fn, arguments)
        return fn

    return register


def _import_from_cwd(top: str, cwd: str) -> None:
    """Import the top-level module of ``-A`` from ``cwd`` when it is there, before anything
    of the same name on sys.path; what it imports in turn is looked up in the usual order."""
    if not top or top in sys.modules:
        return
    spec = importlib.machinery.PathFinder.find_spec(top, [cwd])
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[top]
        raise


def load_app(args: argparse.Namespace, app: Any = None) -> Any:
    """The app for ``-A`` (or ``app``, or a default one), with ``-b``/``--result-backend``
    applied; in a Django project (``DJANGO_SETTINGS_MODULE`` set, possibly by the app's
    module), Django set up as Celery's Django fixup does."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        # After site-packages: a stray ./redis.py must not shadow redis-py. -A proj still
        # finds ./proj.py first (as with Celery): _import_from_cwd.
        sys.path.append(cwd)
    if app is None and args.app:
        _import_from_cwd(args.app.partition(":")[0].strip().split(".")[0], cwd)
        app = find_app(args.app)
    if os.environ.get("DJANGO_SETTINGS_MODULE"):
        from potatoq.contrib.django.fixup import fix_project

        app = fix_project(app)
    if app is None:
        from potatoq.app import Potatoq

        app = Potatoq("potatoq")
    if args.broker:
        app.conf.pin("broker_url", args.broker)  # wins over $POTATOQ_BROKER_URL, as Celery's -b
    if args.result_backend:
        app.conf.pin("result_backend", args.result_backend)
    if args.broker or args.result_backend:
        app.close()  # forget connections made with the old URLs (at import, say)
    return app


def split_queues(values: Sequence[str] | None) -> tuple[str, ...]:
    """``-Q a,b -Q c`` → ``("a", "b", "c")`` (``celery`` read as the ``default`` queue)."""
    from potatoq.routing import queue_name

    names: list[str] = []
    for value in values or ():
        names += [queue_name(name.strip()) for name in value.split(",") if name.strip()]
    return tuple(dict.fromkeys(names))


def setup_logging(app: Any, level: str | None) -> None:
    """A stderr handler for potatoq's loggers (or the root one with worker_hijack_root_logger)."""
    hijack = bool(getattr(app.conf, "worker_hijack_root_logger", False))
    target = logging.getLogger() if hijack else logging.getLogger("potatoq")
    fmt = (
        getattr(app.conf, "worker_log_format", None)
        or "[%(asctime)s: %(levelname)s/%(processName)s] %(message)s"
    )
    from .utils.printable import EscapingFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(EscapingFormatter(fmt))  # task names and ids come from the broker
    if hijack:
        for existing in list(target.handlers):
            target.removeHandler(existing)
    target.addHandler(handler)
    # WARNING by default, as Celery's worker: an INFO line per task costs ~50 us of a
    # ~300 us task on a busy worker; -l info shows them.
    target.setLevel((level or DEFAULT_LOG_LEVEL).upper())
    if not hijack:
        target.propagate = False  # our handler prints it; don't print it twice via root


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _memory_size(text: str) -> int:
    from potatoq.worker.procinfo import parse_size_kib

    try:
        return parse_size_kib(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_loglevel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-l",
        "--loglevel",
        type=str.lower,
        choices=LOG_LEVELS,
        default=None,
        help="log level (default: warning, as Celery)",
    )


# -- worker -------------------------------------------------------------------------------------


def _worker_arguments(parser: argparse.ArgumentParser) -> None:
    from potatoq.worker import POOLS

    parser.add_argument(
        "-c",
        "--concurrency",
        type=_positive_int,
        help="child processes (default: CPUs available to this process)",
    )
    parser.add_argument("-t", "--threads", type=_positive_int, help="threads per child process (default 1)")
    parser.add_argument(
        "-Q",
        "--queues",
        action="append",
        help="queues to consume, comma-separated (default: task_default_queue)",
    )
    parser.add_argument("-P", "--pool", choices=POOLS, help="prefork (default), threads or solo")
    _add_loglevel(parser)
    parser.add_argument("--max-tasks-per-child", type=_positive_int, help="recycle a child after N tasks")
    parser.add_argument(
        "--max-memory-per-child",
        type=_memory_size,
        help="recycle a child above SIZE resident (KiB, or 200M, 1G)",
    )
    parser.add_argument("-n", "--hostname", dest="nodename", help="node name (default potatoq@HOSTNAME)")
    parser.add_argument("--without-beat", action="store_true", help="don't run the periodic scheduler here")
    # Celery's -B embeds beat in one worker; every potatoq worker schedules (deduplicated by
    # the broker), so the flag is accepted for compatibility and changes nothing.
    parser.add_argument(
        "-B", "--beat", action="store_true", help="accepted for Celery compatibility (always on)"
    )
    parser.add_argument("--time-limit", type=float, help="hard time limit in seconds (task_time_limit)")
    parser.add_argument(
        "--soft-time-limit", type=float, help="soft time limit in seconds (task_soft_time_limit)"
    )


@command("worker", "run a worker: claim and run tasks", arguments=_worker_arguments)
def cmd_worker(ctx: CommandContext) -> int:
    from potatoq.worker import WorkerOptions, run_worker

    args, app = ctx.args, ctx.app
    setup_logging(app, args.loglevel)
    if args.time_limit is not None:
        app.conf.task_time_limit = args.time_limit
    if args.soft_time_limit is not None:
        app.conf.task_soft_time_limit = args.soft_time_limit
    options = WorkerOptions.from_app(
        app,
        concurrency=args.concurrency,
        threads=args.threads,
        queues=split_queues(args.queues) or None,
        pool=args.pool,
        nodename=args.nodename,
        max_tasks_per_child=args.max_tasks_per_child,
        max_memory_per_child=args.max_memory_per_child,
        beat=not args.without_beat,
    )
    _refused_early(app)
    return run_worker(app, options)


def _refused_early(app: Any) -> None:
    """A broker that answers but refuses (``redis://…/99``: no such database) stops the
    worker before it starts, in one line (``main``), instead of a traceback per process.
    An unreachable one doesn't: the worker waits for it, as it always has."""
    try:
        app.broker.ping()
    except Exception as exc:
        if client_error(exc) is not None:
            raise


# -- beat -------------------------------------------------------------------------------------


@command("beat", "run only the periodic scheduler (workers run it too)", arguments=_add_loglevel)
def cmd_beat(ctx: CommandContext) -> int:
    from potatoq.worker.scheduler import run_beat

    setup_logging(ctx.app, ctx.args.loglevel)
    finalize = getattr(ctx.app, "finalize", None)
    if finalize is not None:
        finalize()
    return run_beat(ctx.app)


# -- migrate ----------------------------------------------------------------------------------


@command("migrate", "create the broker's tables, queues or scripts now")
def cmd_migrate(ctx: CommandContext) -> int:
    from potatoq.utils import mask_url

    app = ctx.app
    app.broker.migrate()
    ctx.print(f"migrated broker {mask_url(app.conf.broker_url_or_default())}")
    backend = app.backend
    if backend is not None and backend is not app.broker:
        backend.migrate()
        ctx.print(f"migrated result backend {backend!r}")
    return 0


# -- demo -------------------------------------------------------------------------------------


@command("demo", "run a real worker on a fresh SQLite file and send it a mix of tasks")
def cmd_demo(ctx: CommandContext) -> int:
    from potatoq.demo import run_demo

    return run_demo(out=ctx.out)


cli_ops.register(command)  # status, queues, dead, inspect, call, result, revoke, purge, schedule, shell
register_dashboard(COMMANDS, Command)  # potatoq dashboard; worker --metrics-port/--health-port


# ----------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="potatoq", description="potatoq: a task queue with Celery's API that doesn't lose tasks."
    )
    parser.add_argument(
        "-A",
        "--app",
        default=os.environ.get("POTATOQ_APP"),
        help="the app: proj, proj.module or proj.module:attr (default $POTATOQ_APP)",
    )
    parser.add_argument("-b", "--broker", help="broker URL (overrides broker_url)")
    parser.add_argument("--result-backend", help="result backend URL (overrides result_backend)")
    import potatoq

    version = getattr(potatoq, "__version__", "dev")
    parser.add_argument("--version", action="version", version=f"potatoq {version}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS.values():
        sub_parser = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if cmd.arguments is not None:
            cmd.arguments(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None, app: Any = None) -> int:
    """Run the ``potatoq`` command line ``argv``; ``app`` stands for ``-A`` (``app.start()``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    ctx = CommandContext(args, given_app=app)
    try:
        return COMMANDS[args.command].run(ctx)
    except (UsageError, ImproperlyConfigured) as exc:
        print(f"potatoq: error: {scrub(str(exc), ctx.urls())}", file=sys.stderr)
        return 2
    except OperationalError as exc:  # the broker can't be reached: one line, not a traceback
        print(f"potatoq: error: {scrub(str(exc), ctx.urls())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        refused = client_error(exc)  # e.g. redis:///99: "DB index is out of range"
        if refused is None:
            raise
        print(f"potatoq: error: the broker refused: {scrub(refused, ctx.urls())}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
