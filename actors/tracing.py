"""OpenTelemetry tracing and W3C trace-context propagation over NATS headers.

One trace per task: the feeder opens it, and every hop continues it from the
``traceparent`` header of the message it consumed. Export goes to OTLP/HTTP
when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; otherwise to the exporter the
config names: ``file`` writes one JSON object per span per line to
``<trace_dir>/<role>-<replica>.jsonl`` (tests and local runs read these),
``console`` prints spans, ``none`` records nothing.

Cost per message is kept small, because every hop of every trajectory pays it:

- head sampling (``observability.trace_sample_ratio``, 2% by default): the
  trace's root decides once, every later hop follows the ``traceparent`` flag
  (``ParentBased``), so a trajectory is traced whole or not at all. The run's
  own timeline (``RUN_SPANS``: optimizer steps, weight loads) is always
  recorded: a few spans per step, linking only the sampled trajectories;
- exporter "none" installs no SDK provider (``make_provider``);
- the tracer is made once per process (``tracer()``), not per message;
- a hop's span (``hop_span``) in a process that records nothing, or for a
  trajectory its root left unsampled, is one shared no-op context: no span
  object, no header parsing, no context attach and detach per message; the
  incoming ``traceparent`` is passed on as is;
- the file exporter writes each exported batch with one ``write`` (spans are
  batched by ``BatchSpanProcessor``), not one line-buffered write per span,
  and rotates its file at ``trace_file_max_mb`` (one previous file kept), so
  a week-long run cannot fill the disk with traces.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from pathlib import Path

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_ON,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_propagator = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None
_tracers: dict[str, trace.Tracer] = {}
_incoming: ContextVar[str | None] = ContextVar("rlvr_incoming_traceparent", default=None)


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


class JsonLinesExporter(SpanExporter):
    """One JSON object per span per line; one write and one flush per batch.

    With ``max_bytes``, a file that has reached it is renamed to
    ``<stem>.1.jsonl`` (replacing the one before) and a new one is started:
    the newest spans are kept, at most about twice ``max_bytes`` on disk.
    """

    def __init__(self, path: Path, max_bytes: int = 0) -> None:
        self._path = path
        self._max = max_bytes
        self._out = open(path, "a", encoding="utf-8")  # noqa: SIM115 (lives with the process)
        self._size = self._out.tell()

    def export(self, spans) -> SpanExportResult:
        text = "".join(_span_line(span) for span in spans)
        if self._max and self._size and self._size + len(text) > self._max:
            self._rotate()
        self._out.write(text)
        self._out.flush()
        self._size += len(text)
        return SpanExportResult.SUCCESS

    def _rotate(self) -> None:
        self._out.close()
        self._path.replace(self._path.with_suffix(".1.jsonl"))
        self._out = open(self._path, "a", encoding="utf-8")  # noqa: SIM115
        self._size = 0

    def shutdown(self) -> None:
        self._out.close()


# Spans that start traces of their own and are always recorded: the run's timeline
# (one per optimizer step or weight load), not one per trajectory.
RUN_SPANS = frozenset({"learn.step", "rollout.load_weights"})


class HeadSampler(Sampler):
    """Root decisions: a trajectory's root (the feeder's task span) is sampled
    at ``ratio`` by its trace id; a span in ``RUN_SPANS`` always. Used under
    ``ParentBased``, so every later hop follows its root."""

    def __init__(self, ratio: float) -> None:
        self._ratio = TraceIdRatioBased(ratio)

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None,
                      trace_state=None) -> SamplingResult:
        sampler = ALWAYS_ON if name in RUN_SPANS else self._ratio
        return sampler.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return f"HeadSampler({self._ratio.get_description()}, always {sorted(RUN_SPANS)})"



def make_provider(
    *, service: str, replica: str, run: str, exporter: str, trace_dir: str | Path, sample_ratio: float = 1.0,
    file_max_bytes: int = 0,
) -> TracerProvider | None:
    """The tracer provider a process with these settings uses; None when it
    has nothing to export (exporter "none" and no OTLP endpoint).

    With no provider, the API's no-op tracer costs next to nothing, nothing
    is extracted, and ``inject_headers`` copies the incoming ``traceparent``
    (``passing_on``) onto what this hop publishes, so a downstream role that
    does export still joins the same trace.
    """
    otlp = bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    if exporter == "none" and not otlp:
        return None
    resource = Resource.create(
        {"service.name": f"rlvr-{service}", "service.instance.id": replica, "rlvr.run": run}
    )
    provider = TracerProvider(resource=resource, sampler=ParentBased(HeadSampler(sample_ratio)))
    if otlp:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    elif exporter == "file":
        path = Path(trace_dir)
        path.mkdir(parents=True, exist_ok=True)
        # Batched: a span's end must not cost a synchronous write in the hot
        # path; shutdown_tracing() flushes what is pending on a clean exit.
        exporter_ = JsonLinesExporter(path / f"{service}-{replica}.jsonl", max_bytes=file_max_bytes)
        provider.add_span_processor(BatchSpanProcessor(exporter_))
    elif exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    return provider


def setup_tracing(
    *, service: str, replica: str, run: str, exporter: str, trace_dir: str | Path, sample_ratio: float = 1.0,
    file_max_bytes: int = 0,
) -> None:
    """Install this process's tracer provider (once; see ``make_provider``)."""
    global _provider
    provider = make_provider(service=service, replica=replica, run=run, exporter=exporter, trace_dir=trace_dir,
                             sample_ratio=sample_ratio, file_max_bytes=file_max_bytes)
    if provider is None:
        return
    trace.set_tracer_provider(provider)
    _provider = provider
    _tracers.clear()


def shutdown_tracing() -> None:
    if _provider is not None:
        _provider.shutdown()


def tracer(name: str = "rlvr") -> trace.Tracer:
    """This process's tracer, made once (``trace.get_tracer`` is not cheap)."""
    t = _tracers.get(name)
    if t is None:
        t = _tracers[name] = trace.get_tracer(name)
    return t


_NOT_RECORDING: AbstractContextManager[trace.Span] = nullcontext(trace.INVALID_SPAN)


def hop_span(
    name: str, context: otel_context.Context | None, attributes: Mapping[str, str | int | float]
) -> AbstractContextManager[trace.Span]:
    """The span of one hop of a trajectory, continuing ``context`` (the
    consumed message's); the span is current inside the block, so what the hop
    publishes carries it. In a process that records nothing, a shared no-op
    block whose span is not recording: the incoming ``traceparent`` is passed
    on by ``passing_on`` instead."""
    if _provider is None or _unsampled(_incoming.get()):
        return _NOT_RECORDING
    return tracer().start_as_current_span(name, context=context, attributes=attributes)


_W3C = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def _well_formed(traceparent: str | None) -> bool:
    """A W3C ``traceparent`` (version 00) as this project writes them; a hop
    passes on nothing else (the header is untrusted, and copied onto every
    message the hop publishes)."""
    return traceparent is not None and len(traceparent) == 55 and _matches_w3c(traceparent)


@functools.lru_cache(maxsize=1024)
def _matches_w3c(traceparent: str) -> bool:
    """Memoised: a hop asks up to three times of each message's header (its
    context, its span, the headers it publishes)."""
    return _W3C.fullmatch(traceparent) is not None


def _unsampled(traceparent: str | None) -> bool:
    """A well-formed ``traceparent`` whose sampled flag is off: the root
    decided not to record this trajectory (head sampling), so no hop does."""
    return _well_formed(traceparent) and not int(traceparent[53:55], 16) & 1  # type: ignore[index]


def inject_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """Headers with the current span's ``traceparent`` added; with no span
    current (a process that records nothing, an unsampled trajectory), the
    ``traceparent`` of the message being handled (``passing_on``)."""
    carrier: dict[str, str] = dict(headers or {})
    if _provider is None or not trace.get_current_span().get_span_context().is_valid:
        incoming = _incoming.get()
        if _well_formed(incoming):
            carrier["traceparent"] = incoming
        return carrier
    _propagator.inject(carrier)
    return carrier


class passing_on:  # noqa: N801 (used as a context manager, like contextlib's)
    """Handle a message that carries ``traceparent``: a process that records no
    spans passes it on unchanged to what it publishes (when well-formed), so the
    trajectory's trace stays whole downstream at the cost of a string copy.
    A class, not a generator: it is entered once per message on every hop."""

    __slots__ = ("_token", "_traceparent")

    def __init__(self, traceparent: str | None) -> None:
        self._traceparent = traceparent

    def __enter__(self) -> None:
        self._token = _incoming.set(self._traceparent)

    def __exit__(self, *exc: object) -> None:
        _incoming.reset(self._token)


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id in a W3C ``traceparent`` header (for log lines), or None."""
    if traceparent and len(traceparent) == 55 and traceparent[2] == "-":
        return traceparent[3:35]
    return None


def extract_context(headers: Mapping[str, str] | None) -> otel_context.Context | None:
    """The remote context a message carries; None when it carries none, so a
    span started with it is a root (the propagator is not run for nothing)."""
    if _provider is None or not headers or "traceparent" not in headers or _unsampled(headers["traceparent"]):
        return None  # recording nothing for it here: the header is passed on as is (``passing_on``)
    return _propagator.extract(headers)


def remote_span_context(context: otel_context.Context | None) -> trace.SpanContext | None:
    """The producer's span context in an extracted ``context`` (for span links)."""
    if context is None:
        return None
    ctx = trace.get_current_span(context).get_span_context()
    return ctx if ctx.is_valid else None
