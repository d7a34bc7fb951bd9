"""OpenTelemetry tracing (the ``[otel]`` extra): the trace context travels with the task.

``instrument()`` connects to potatoq's signals. Sending a task opens a PRODUCER span
``send <task name>`` and writes the W3C trace context (``traceparent``/``tracestate``) into
the message headers; running it opens a CONSUMER span ``run <task name>`` whose parent is
that context, so a request's trace continues through ``.delay()`` into the worker::

    from potatoq.contrib.otel import instrument
    instrument()               # in the producer and in the worker (e.g. in the app module)
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from .. import signals

__all__ = ["instrument", "uninstrument"]

_MAX_OPEN = 10000  # spans whose end signal never came (a failed publish) are dropped past this


class _Tracing:
    def __init__(self, tracer_provider: Any = None) -> None:
        self.tracer = trace.get_tracer("potatoq", tracer_provider=tracer_provider)
        self.lock = threading.Lock()
        self.sending: OrderedDict[str, Any] = OrderedDict()
        self.running: OrderedDict[str, tuple[Any, Any]] = OrderedDict()

    def _remember(self, table: OrderedDict[str, Any], key: str, value: Any) -> None:
        with self.lock:
            table[key] = value
            while len(table) > _MAX_OPEN:
                table.popitem(last=False)

    def before_publish(self, sender: Any = None, body: Any = None, headers: Any = None, **_: Any) -> None:
        if body is None or headers is None:
            return
        span = self.tracer.start_span(
            f"send {body.task}",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": "potatoq",
                "messaging.destination.name": body.queue,
                "messaging.message.id": body.id,
                "potatoq.task": body.task,
            },
        )
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        headers.update(carrier)  # the message's own header dict, encoded after this signal
        self._remember(self.sending, body.id, span)

    def after_publish(self, sender: Any = None, body: Any = None, **_: Any) -> None:
        with self.lock:
            span = self.sending.pop(getattr(body, "id", ""), None)
        if span is not None:
            span.end()

    def prerun(self, sender: Any = None, task_id: str | None = None, task: Any = None, **_: Any) -> None:
        if task is None or task_id is None:
            return
        headers = dict(getattr(task.request, "headers", None) or {})
        parent = propagate.extract(headers)
        span = self.tracer.start_span(
            f"run {task.name}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "potatoq",
                "messaging.message.id": task_id,
                "potatoq.task": task.name,
            },
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        self._remember(self.running, task_id, (span, token))

    def failure(
        self, sender: Any = None, task_id: str | None = None, exception: Any = None, **_: Any
    ) -> None:
        with self.lock:
            entry = self.running.get(task_id or "")
        if entry is not None and isinstance(exception, BaseException):
            entry[0].record_exception(exception)
            entry[0].set_status(Status(StatusCode.ERROR, str(exception)))

    def postrun(
        self, sender: Any = None, task_id: str | None = None, state: str | None = None, **_: Any
    ) -> None:
        with self.lock:
            entry = self.running.pop(task_id or "", None)
        if entry is None:
            return
        span, token = entry
        if state:
            span.set_attribute("potatoq.state", state)
        # a context attached in another coroutine can't be detached here
        with contextlib.suppress(Exception):
            otel_context.detach(token)
        span.end()


_active: _Tracing | None = None


def instrument(tracer_provider: Any = None) -> None:
    """Trace sending and running tasks in this process (idempotent)."""
    global _active
    if _active is not None:
        return
    tracing = _Tracing(tracer_provider)
    signals.before_task_publish.connect(tracing.before_publish)
    signals.after_task_publish.connect(tracing.after_publish)
    signals.task_prerun.connect(tracing.prerun)
    signals.task_failure.connect(tracing.failure)
    signals.task_postrun.connect(tracing.postrun)
    _active = tracing


def uninstrument() -> None:
    global _active
    tracing, _active = _active, None
    if tracing is None:
        return
    signals.before_task_publish.disconnect(tracing.before_publish)
    signals.after_task_publish.disconnect(tracing.after_publish)
    signals.task_prerun.disconnect(tracing.prerun)
    signals.task_failure.disconnect(tracing.failure)
    signals.task_postrun.disconnect(tracing.postrun)
