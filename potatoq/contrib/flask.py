"""Flask: ``init_app(flask_app)`` makes (or configures) the app from ``flask_app.config``,
and every task runs inside ``flask_app.app_context()``::

    from flask import Flask
    from potatoq.contrib.flask import init_app

    def create_app() -> Flask:
        flask_app = Flask(__name__)
        flask_app.config.from_mapping(POTATOQ={"broker_url": "sqlite:///tasks.sqlite3"})
        init_app(flask_app)                     # also flask_app.extensions["potatoq"]
        return flask_app

Settings come from the ``POTATOQ`` dict (or Flask's documented ``CELERY`` dict) and from
``CELERY_*`` / ``POTATOQ_*`` keys, with Celery's setting names. The app context is pushed
when a task starts and popped when it ends (``task_prerun`` / ``task_postrun`` signals: the
worker calls ``run`` directly, so overriding ``Task.__call__`` as in Celery's recipe would
never run); an ``async def`` task sees it too, since its coroutine copies the context. A
direct call, ``task(...)``, runs inside it as well (``app.direct_call_contexts``), and so do
``task.apply()`` and ``task_always_eager`` runs, which go through the same signals.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

from flask import Flask, current_app, has_app_context
from flask.ctx import AppContext

from .. import signals
from ..app import Potatoq
from ..exceptions import ImproperlyConfigured

__all__ = ["init_app", "settings_from_config"]

_BLOCKS = ("CELERY", "POTATOQ")  # later wins
_PREFIXES = ("CELERY_", "POTATOQ_")


def settings_from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The potatoq settings in a Flask config: prefixed keys, then the ``CELERY`` and
    ``POTATOQ`` dicts."""
    values: dict[str, Any] = {key: value for key, value in config.items() if key.startswith(_PREFIXES)}
    for name in _BLOCKS:
        block = config.get(name)
        if block is None:
            continue
        if not isinstance(block, Mapping):
            raise ImproperlyConfigured(
                f"app.config[{name!r}] must be a dict of settings, not {type(block).__name__}"
            )
        values.update(block)
    return values


class _AppContexts:
    """Pushes ``flask_app``'s app context around each task of ``app``."""

    def __init__(self, flask_app: Flask, app: Potatoq) -> None:
        self.flask_app = flask_app
        self.app = app
        self._pushed: contextvars.ContextVar[tuple[tuple[str, AppContext], ...]] = contextvars.ContextVar(
            f"potatoq_flask_{id(self)}", default=()
        )

    def _ours(self, sender: Any) -> bool:
        return getattr(sender, "app", None) is self.app

    def started(self, sender: Any = None, task_id: str = "", **_: Any) -> None:
        if not self._ours(sender):
            return
        self._pop_all()  # left by a run that ended without task_postrun (a retry, say)
        context = self.flask_app.app_context()
        context.push()
        self._pushed.set((*self._pushed.get(), (task_id, context)))

    def ended(self, sender: Any = None, **_: Any) -> None:
        if self._ours(sender):
            self._pop_all()

    def _pop_all(self) -> None:
        pushed = self._pushed.get()
        self._pushed.set(())
        for _, context in reversed(pushed):
            context.pop()

    @contextlib.contextmanager
    def direct_call(self) -> Iterator[None]:
        """Around ``task(...)``: Celery's ``FlaskTask.__call__`` recipe. A call made inside
        this Flask app's context already (a view, another task) keeps that context and its
        ``g``."""
        if has_app_context() and current_app._get_current_object() is self.flask_app:  # type: ignore[attr-defined]
            yield
            return
        with self.flask_app.app_context():
            yield

    def connect(self) -> None:
        self.app.direct_call_contexts.append(self.direct_call)
        signals.task_prerun.connect(self.started)
        signals.task_postrun.connect(self.ended)
        signals.task_retry.connect(self.ended)


def init_app(flask_app: Flask, app: Potatoq | None = None) -> Potatoq:
    """Configure ``app`` (or a new one named after the Flask app) from ``flask_app.config``."""
    values = settings_from_config(flask_app.config)
    if app is None:
        app = Potatoq(flask_app.import_name)
    app.config_from_object(values)
    contexts = _AppContexts(flask_app, app)
    contexts.connect()
    flask_app.extensions["potatoq"] = app
    flask_app.extensions["potatoq.contexts"] = contexts  # keeps the signal receivers alive
    return app
