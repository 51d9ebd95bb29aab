"""OpenTelemetry spans on the request path, through the API only (``opentelemetry-api``).

Tracing is off unless a process configures it (wiring/tracing.py): without a recording span
around the call, every helper here is a check of the current span and nothing more, so an
untraced request pays no more than a no-op tracer. Span attributes are route, status, stage
names, counts and the index version: never document text, query text or a principal.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.util.types import AttributeValue

_tracer = trace.get_tracer("ragline")
log = logging.getLogger(__name__)


def tracer() -> trace.Tracer:
    return _tracer


def recording() -> bool:
    """True inside a span that records (tracing is on and this request is sampled)."""
    return trace.get_current_span().is_recording()


def current_trace_id() -> str | None:
    """The current trace id as 32 hex digits, or None outside a recording span."""
    span = trace.get_current_span()
    if not span.is_recording():
        return None
    return trace.format_trace_id(span.get_span_context().trace_id)


@contextmanager
def span(name: str, **attributes: AttributeValue) -> Iterator[trace.Span | None]:
    """A child span of the current one, or nothing at all when the current one does not record."""
    if not recording():
        yield None
        return
    with _tracer.start_as_current_span(name, attributes=attributes) as current:
        yield current


def stage_span(stage: str, started: float, **attributes: AttributeValue) -> None:
    """Record a finished stage as a child span, from its ``time.perf_counter()`` start to now.

    The stages already time themselves (``timings_ms``, Server-Timing); this is the same seam,
    turned into a span after the fact so the stage code stays as it is.
    """
    if not recording():
        return
    end_ns = time.time_ns()
    start_ns = end_ns - int((time.perf_counter() - started) * 1e9)
    attrs = {"ragline.stage": stage, **attributes}
    _tracer.start_span(f"retrieve.{stage}", start_time=start_ns, attributes=attrs).end(end_time=end_ns)


def set_attributes(attributes: Mapping[str, AttributeValue]) -> None:
    """Attributes on the current span (nothing when it does not record)."""
    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(attributes)


def carrier() -> dict[str, str]:
    """The current context as W3C ``traceparent``/``tracestate`` headers, for a call to another
    process (empty when the current span does not record)."""
    out: dict[str, str] = {}
    if recording():
        propagate.inject(out)
    return out


@contextmanager
def continued(name: str, headers: Mapping[str, str], **attributes: AttributeValue) -> Iterator[None]:
    """A span in this process continuing the trace another process sent in ``headers``
    (nothing when it sent none)."""
    if not headers:
        yield
        return
    with _tracer.start_as_current_span(
        name, context=propagate.extract(dict(headers)), kind=trace.SpanKind.SERVER, attributes=attributes
    ):
        yield


def install_provider() -> None:
    """Install an SDK tracer provider configured by the ``OTEL_*`` variables: OTLP over HTTP
    (or ``OTEL_TRACES_EXPORTER=console``), batched; a provider already installed is kept."""
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return  # someone configured the SDK already: use theirs
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError as exc:
        raise RuntimeError(
            "tracing is configured but opentelemetry-sdk is not installed: pip install 'ragline[otel]'"
        ) from exc
    name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    exporter: SpanExporter
    if name == "console":
        exporter = ConsoleSpanExporter()
    elif name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    else:
        raise RuntimeError(f"OTEL_TRACES_EXPORTER={name!r}: ragline supports otlp (HTTP), console or none")
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "ragline")})
    provider = TracerProvider(resource=resource)  # flushed and shut down at exit
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info("tracing on: exporter %s", name)
