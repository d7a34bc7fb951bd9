"""What every operations command shares: the app and its broker, exit codes, and errors.

A command is a function ``run(session) -> int``. :func:`guarded` turns the failures a user
can act on into one line on stderr and a meaningful exit status instead of a traceback:

* the broker (or result backend) can't be reached: exit 1, naming the masked URL;
* a bad URL or setting (``ImproperlyConfigured``) is left to ``potatoq.cli.main`` (exit 2);
* :class:`CliError` carries its own message and status (e.g. 3: no such dead letter).

This package never imports ``potatoq.cli`` at run time: ``python -m potatoq.cli`` runs that
file as ``__main__``, and a second import would make a second, disconnected registry.
"""

from __future__ import annotations

import contextlib
import enum
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from potatoq.brokers.base import Broker
from potatoq.exceptions import ImproperlyConfigured, OperationalError, PotatoqError
from potatoq.urls import client_error
from potatoq.utils import mask_url, scrub

from .output import Style, color_enabled, dump_json

if TYPE_CHECKING:
    import argparse

    from potatoq.app import Potatoq
    from potatoq.cli import CommandContext

__all__ = ["CliError", "Exit", "Registrar", "Session", "guarded"]


class Exit(enum.IntEnum):
    """Exit statuses of the potatoq command (docs/cli.md lists them)."""

    OK = 0
    ERROR = 1  # the broker can't be reached, or another operation failed
    USAGE = 2  # bad options, app path, URL or setting
    FAILED = 3  # not found, or the task failed: FAILURE/REVOKED, unknown id, no worker online
    NOT_READY = 4  # the result isn't ready (PENDING, STARTED, RETRY) after --wait
    ABORTED = 5  # a confirmation was declined


class CliError(Exception):
    """A message for the user and the exit status that goes with it."""

    def __init__(self, message: str, status: Exit = Exit.ERROR) -> None:
        super().__init__(message)
        self.status = status


class Registrar(Protocol):
    """``potatoq.cli.command``: registers a subcommand."""

    def __call__(
        self,
        name: str,
        help: str,  # noqa: A002 - argparse's word
        *,
        arguments: Callable[[argparse.ArgumentParser], None] | None = ...,
    ) -> Callable[[Callable[[CommandContext], int]], Callable[[CommandContext], int]]: ...


class Session:
    """One command's view of the app: lazily made broker and backend, output helpers."""

    def __init__(self, ctx: CommandContext, err: TextIO | None = None) -> None:
        self.ctx = ctx
        self.args = ctx.args
        self.out: TextIO = ctx.out
        self.err: TextIO = err or sys.stderr
        self.style = Style(color_enabled(self.out))
        self._broker: Broker | None = None
        self._target = "broker"

    @property
    def app(self) -> Potatoq:
        app: Potatoq = self.ctx.app
        return app

    def args_app_given(self) -> bool:
        """True when ``-A`` (or ``$POTATOQ_APP``) named an app, rather than the default one."""
        return bool(getattr(self.args, "app", None))

    @property
    def broker_url(self) -> str:
        return mask_url(self.app.conf.broker_url_or_default())

    @property
    def broker(self) -> Broker:
        if self._broker is None:
            try:
                self._broker = self.app.broker
            except ValueError as exc:  # e.g. a port that isn't a number
                if isinstance(exc, PotatoqError):
                    raise
                raise CliError(f"bad broker URL {self.broker_url!r}: {exc}", Exit.USAGE) from None
        return self._broker

    @property
    def backend(self) -> Broker | None:
        self.broker  # noqa: B018 - made first, so that a bad broker URL is reported as such
        return self.app.backend

    def require_backend(self, what: str) -> Broker:
        backend = self.backend
        if backend is None:
            raise CliError(
                f"{what} needs stored results, and this app stores none (broker {self.broker_url}, "
                "result_backend off): pass --result-backend URL or set result_backend",
                Exit.USAGE,
            )
        return backend

    @contextlib.contextmanager
    def using_backend(self) -> Iterator[None]:
        """Connection errors inside are blamed on the result backend (when it is separate)."""
        previous, self._target = self._target, "result backend"
        try:
            yield
        finally:
            self._target = previous

    # -- output ------------------------------------------------------------------------------

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def json(self, value: Any) -> None:
        dump_json(value, self.out)

    def note(self, text: str) -> None:
        """A remark for people, on stderr (stdout stays clean for scripts)."""
        self.err.write(f"potatoq: {text}\n")
        self.err.flush()

    # -- errors ------------------------------------------------------------------------------

    def connection_errors(self) -> tuple[type[BaseException], ...]:
        found: tuple[type[BaseException], ...] = (*Broker.connection_errors, OperationalError)
        for broker in (self._broker, self._separate_backend()):
            if broker is not None:
                found += tuple(broker.connection_errors)
        return found

    def _separate_backend(self) -> Broker | None:
        if self._broker is None:
            return None
        try:
            backend = self.app.backend
        except Exception:  # noqa: BLE001 - only used to word an error message
            return None
        return backend if backend is not None and backend is not self._broker else None

    def unreachable(self, exc: BaseException) -> str:
        """The one-line message for a connection error."""
        text = str(exc) or type(exc).__name__
        if text.startswith("can't reach"):
            return text
        url = self.broker_url
        backend = self._separate_backend() if self._target == "result backend" else None
        if backend is not None:
            return f"can't reach the result backend at {mask_url(backend.config.url)}: {text}"
        return f"can't reach the broker at {url}: {text}"


def one_line(text: object) -> str:
    """Client libraries' messages can span lines (libpq's do): fold them into one."""
    return " ".join(str(text).split())


def guarded(fn: Callable[[Session], int]) -> Callable[[CommandContext], int]:
    """Run ``fn`` with a :class:`Session`; user-facing failures become one line on stderr."""

    def run(ctx: CommandContext) -> int:
        session = Session(ctx)

        def error(text: object) -> None:
            # No part of a URL's password, wherever a client library put it in its message.
            session.err.write(f"potatoq: error: {scrub(one_line(text), ctx.urls())}\n")

        try:
            return int(fn(session))
        except CliError as exc:
            error(exc)
            return int(exc.status)
        except ImproperlyConfigured:
            raise  # potatoq.cli.main prints it: exit 2
        except Exception as exc:
            if isinstance(exc, session.connection_errors()):
                error(session.unreachable(exc))
                return int(Exit.ERROR)
            if isinstance(exc, PotatoqError):
                error(exc)
                return int(Exit.ERROR)
            refused = client_error(exc)  # the server said no, e.g. "DB index is out of range"
            if refused is not None:
                error(f"the broker refused: {refused}")
                return int(Exit.ERROR)
            raise
        finally:
            session.err.flush()

    run.__name__ = run.__qualname__ = getattr(fn, "__name__", "run")
    run.__doc__ = fn.__doc__
    return run
