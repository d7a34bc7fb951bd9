"""The trace context travels from .delay() into the task, with send and run spans."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

from potatoq import Potatoq  # noqa: E402
from potatoq.contrib import otel  # noqa: E402
from potatoq.testing import drain  # noqa: E402


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.uninstrument()  # instrument() is idempotent: an earlier caller's (a docs example's) would stay
    otel.instrument(tracer_provider=provider)
    yield exporter
    otel.uninstrument()


def test_trace_context_travels_into_the_task(spans: InMemorySpanExporter) -> None:
    app = Potatoq("otel", broker=f"memory://{uuid.uuid4().hex}", result_backend="broker")
    seen: dict[str, object] = {}

    @app.task(bind=True)
    def traced(self) -> int:  # type: ignore[no-untyped-def]
        seen["traceparent"] = self.request.headers.get("traceparent")
        return 1

    @app.task
    def boom() -> None:
        raise ValueError("x")

    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("request") as request_span:
        r = traced.delay()
        boom.delay()
    drain(app)
    assert r.get(timeout=1) == 1
    finished = {s.name: s for s in spans.get_finished_spans()}
    send, run = finished[f"send {traced.name}"], finished[f"run {traced.name}"]
    assert send.kind == SpanKind.PRODUCER and run.kind == SpanKind.CONSUMER
    trace_id = request_span.get_span_context().trace_id
    assert send.context.trace_id == trace_id == run.context.trace_id
    assert run.parent is not None and run.parent.span_id == send.context.span_id
    assert isinstance(seen["traceparent"], str)
    failed = finished[f"run {boom.name}"]
    assert not failed.status.is_ok and failed.events[0].name == "exception"
