"""Celery-style signals: ``@task_success.connect`` and friends.

A receiver is called with ``sender=`` and the signal's keyword arguments; an exception in a
receiver is logged and never breaks the task or the worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("potatoq.signals")

Receiver = Callable[..., Any]


class Signal:
    """A named hook; ``connect`` works bare, with ``sender=`` and as a decorator."""

    def __init__(self, name: str, providing_args: tuple[str, ...] = ()) -> None:
        self.name = name
        self.providing_args = providing_args
        self._receivers: list[tuple[Receiver, Any]] = []
        self._lock = threading.Lock()

    def connect(self, receiver: Receiver | None = None, *, sender: Any = None, **_: Any) -> Any:
        def register(fn: Receiver) -> Receiver:
            with self._lock:
                if not any(r is fn and s is sender for r, s in self._receivers):
                    self._receivers.append((fn, sender))
            return fn

        if receiver is None:
            return register
        return register(receiver)

    def disconnect(self, receiver: Receiver, *, sender: Any = None) -> None:
        with self._lock:
            self._receivers = [(r, s) for r, s in self._receivers if not (r is receiver and s is sender)]

    @property
    def receivers(self) -> list[Receiver]:
        return [r for r, _ in self._receivers]

    def send(self, sender: Any = None, **kwargs: Any) -> list[tuple[Receiver, Any]]:
        if not self._receivers:  # the usual case, several times per task in a worker
            return []
        responses: list[tuple[Receiver, Any]] = []
        for receiver, wanted in list(self._receivers):
            if wanted is not None and wanted is not sender and wanted != getattr(sender, "name", sender):
                continue
            try:
                responses.append((receiver, receiver(sender=sender, signal=self, **kwargs)))
            except Exception as exc:
                logger.exception("signal %s receiver %r raised %r", self.name, receiver, exc)
                responses.append((receiver, exc))
        return responses

    send_robust = send

    def __repr__(self) -> str:
        return f"<Signal: {self.name}>"


before_task_publish = Signal("before_task_publish")
after_task_publish = Signal("after_task_publish")
task_received = Signal("task_received")
task_prerun = Signal("task_prerun")
task_postrun = Signal("task_postrun")
task_success = Signal("task_success")
task_failure = Signal("task_failure")
task_retry = Signal("task_retry")
task_revoked = Signal("task_revoked")
task_rejected = Signal("task_rejected")
task_unknown = Signal("task_unknown")
task_internal_error = Signal("task_internal_error")
worker_init = Signal("worker_init")
worker_process_init = Signal("worker_process_init")
worker_process_shutdown = Signal("worker_process_shutdown")
worker_ready = Signal("worker_ready")
worker_shutting_down = Signal("worker_shutting_down")
worker_shutdown = Signal("worker_shutdown")
worker_before_create_process = Signal("worker_before_create_process")
beat_init = Signal("beat_init")
beat_embedded_init = Signal("beat_embedded_init")
setup_logging = Signal("setup_logging")
after_setup_logger = Signal("after_setup_logger")
after_setup_task_logger = Signal("after_setup_task_logger")
import_modules = Signal("import_modules")
#: Sent with ``sender=app`` when a Potatoq app has been created (potatoq-only).
app_created = Signal("app_created")
