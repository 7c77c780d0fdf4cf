"""OpenTelemetry tracing and W3C trace-context propagation over NATS headers.

One trace per task: the feeder opens it, and every hop continues it from the
``traceparent`` header of the message it consumed. Export goes to OTLP/HTTP
when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; otherwise to the exporter the
config names: ``file`` writes one JSON object per span per line to
``<trace_dir>/<role>-<replica>.jsonl`` (tests and local runs read these),
``console`` prints spans, ``none`` records nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_propagator = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None


def _span_line(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    parent = span.parent
    record = {
        "name": span.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{parent.span_id:016x}" if parent else None,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "service": span.resource.attributes.get("service.name"),
        "attributes": dict(span.attributes or {}),
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
        "status": span.status.status_code.name,
    }
    return json.dumps(record, default=str) + "\n"


def setup_tracing(
    *, service: str, replica: str, run: str, exporter: str, trace_dir: str | Path
) -> None:
    """Install the global tracer provider for this process (once)."""
    global _provider
    resource = Resource.create(
        {"service.name": f"rlvr-{service}", "service.instance.id": replica, "rlvr.run": run}
    )
    provider = TracerProvider(resource=resource)
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    elif exporter == "file":
        path = Path(trace_dir)
        path.mkdir(parents=True, exist_ok=True)
        out = open(path / f"{service}-{replica}.jsonl", "a", buffering=1)  # noqa: SIM115 (lives with the process)
        # Batched: a span's end must not cost a synchronous write in the hot
        # path; shutdown_tracing() flushes what is pending on a clean exit.
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=out, formatter=_span_line)))
    elif exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
    _provider = provider


def shutdown_tracing() -> None:
    if _provider is not None:
        _provider.shutdown()


def tracer(name: str = "rlvr") -> trace.Tracer:
    return trace.get_tracer(name)


def inject_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """Headers with the current span's ``traceparent`` added."""
    carrier: dict[str, str] = dict(headers or {})
    _propagator.inject(carrier)
    return carrier


def extract_context(headers: Mapping[str, str] | None) -> otel_context.Context:
    return _propagator.extract(dict(headers or {}))


def trace_id_hex(span: trace.Span | None = None) -> str | None:
    ctx = (span or trace.get_current_span()).get_span_context()
    return f"{ctx.trace_id:032x}" if ctx.is_valid else None


def span_context_from_headers(headers: Mapping[str, str] | None) -> trace.SpanContext | None:
    """The remote span context a message carries (for span links)."""
    ctx = trace.get_current_span(extract_context(headers)).get_span_context()
    return ctx if ctx.is_valid else None
