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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry import context as _context_api
from opentelemetry.util.types import AttributeValue

_tracer = trace.get_tracer("ragline")
log = logging.getLogger(__name__)

# Set by install_provider when ragline's own provider exports through its child process and
# nothing else: spans that are finished when made (stages, batches) then reach it as rows
# (core/span_export.finished_row), skipping the SDK span object and its checks (~40 µs each).
_rows: Any = None
# With it: the tracer of ragline's own current spans and the provider the psycopg
# instrumentation gets, both making core/span_export.RowSpan rows.
_row_tracer: Any = None
_row_provider: Any = None


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
    with current_span(name, attributes=attributes) as current:
        yield current


def current_span(
    name: str,
    *,
    context: _context_api.Context | None = None,
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> AbstractContextManager[trace.Span]:
    """``start_as_current_span`` of ragline's tracer: a span current inside the block (child of
    ``context``'s span, or the current one), ended at its end, an escaping exception recorded
    on it with status ERROR. Where ragline's own provider exports through its child process, a
    ``RowSpan`` (core/span_export.py) that is queued as a row at its end; otherwise the SDK's."""
    tracer = _tracer if _row_tracer is None else _row_tracer
    return tracer.start_as_current_span(name, context=context, kind=kind, attributes=attributes)


def stage_span(stage: str, started: float, **attributes: AttributeValue) -> None:
    """Record a finished stage as a child span, from its ``time.perf_counter()`` start to now.

    The stages already time themselves (``timings_ms``, Server-Timing); this is the same seam,
    turned into a span after the fact so the stage code stays as it is.
    """
    current = trace.get_current_span()
    if not current.is_recording():
        return
    end_ns = time.time_ns()
    start_ns = end_ns - int((time.perf_counter() - started) * 1e9)
    attrs = {"ragline.stage": stage, **attributes}
    if _rows is not None:
        _rows.finished(f"retrieve.{stage}", current.get_span_context(), start_ns, end_ns, attrs)
        return
    _tracer.start_span(f"retrieve.{stage}", start_time=start_ns, attributes=attrs).end(end_time=end_ns)


def waiting_context() -> context.Context | None:
    """The current context when its span records: what a request hands a batcher it waits on,
    so the batch shows in the request's trace (None, and nothing kept, when untraced)."""
    return context.get_current() if recording() else None


def batch_spans(
    name: str, parents: Sequence[context.Context], start_ns: int, end_ns: int, **attributes: AttributeValue
) -> None:
    """One finished span per waiting request, child of its span, for a batch that served
    several: a span has one parent, and each request's trace should show the batch its
    items rode in (with the batch's size, so a slow batch of many explains a slow request)."""
    for parent in parents:
        if _rows is not None:
            parent_span = trace.get_current_span(parent).get_span_context()
            _rows.finished(name, parent_span, start_ns, end_ns, dict(attributes))
            continue
        batch = _tracer.start_span(name, context=parent, start_time=start_ns, attributes=attributes)
        batch.end(end_time=end_ns)


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
    with current_span(
        name, context=propagate.extract(dict(headers)), kind=trace.SpanKind.SERVER, attributes=attributes
    ):
        yield


# Set by enable_database_spans: instruments a new connection (opentelemetry-instrumentation-psycopg).
_instrument_connection: Callable[..., Any] | None = None


def enable_database_spans() -> bool:
    """A span per PostgreSQL statement on every connection opened from now on, through
    ``opentelemetry-instrumentation-psycopg`` (the ``otel`` extra): the statement text with its
    placeholders (``db.statement``), never its parameters. False when the package is absent."""
    global _instrument_connection
    try:
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    except ImportError:
        log.warning("opentelemetry-instrumentation-psycopg is not installed: no PostgreSQL spans")
        return False
    _instrument_connection = PsycopgInstrumentor.instrument_connection
    return True


def disable_database_spans() -> None:
    """Connections opened from now on get no statement spans (a process that turned tracing off)."""
    global _instrument_connection
    _instrument_connection = None


def trace_connection(conn: Any) -> None:
    """Give a new connection statement spans when they are on (a pool's ``configure`` hook)."""
    if _instrument_connection is not None:
        _instrument_connection(conn, tracer_provider=_row_provider)  # None: the global provider


@contextmanager
def untraced() -> Iterator[None]:
    """No instrumentation spans inside (a pool's health check would be a span per checkout)."""
    token = context.attach(context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        yield
    finally:
        context.detach(token)


def install_provider(*, export_process: bool = True) -> None:
    """Install an SDK tracer provider configured by the ``OTEL_*`` variables: OTLP over HTTP
    (or ``OTEL_TRACES_EXPORTER=console``), batched; a provider already installed is kept.

    With ``export_process`` the OTLP encoding and posts run in a child process
    (core/span_export.py), off this interpreter's GIL; otherwise in the SDK's batch thread."""
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
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "ragline")})
    # flushed and shut down at exit
    provider = TracerProvider(resource=resource, sampler=_no_statement_roots())
    if name == "otlp" and export_process:
        try:
            from core.span_export import ProcessSpanProcessor, RowTracerProvider
        except ImportError as exc:  # the OTLP exporter's protobuf classes (opentelemetry-proto)
            raise RuntimeError(
                "tracing exports OTLP but opentelemetry-exporter-otlp-proto-http is not installed:"
                " pip install 'ragline[otel]'"
            ) from exc

        global _rows, _row_tracer, _row_provider
        processor = ProcessSpanProcessor(resource)
        processor.bind(provider.sampler, provider.id_generator)
        provider.add_span_processor(processor)
        trace.set_tracer_provider(provider)
        _rows = processor
        _row_provider = RowTracerProvider(processor)
        _row_tracer = _row_provider.get_tracer("ragline")
        log.info("tracing on: exporter otlp, in a child process")
        return
    exporter: SpanExporter
    if name == "console":
        exporter = ConsoleSpanExporter()
    elif name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    else:
        raise RuntimeError(f"OTEL_TRACES_EXPORTER={name!r}: ragline supports otlp (HTTP), console or none")
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info("tracing on: exporter %s", name)


def _no_statement_roots() -> Any:
    """The sampler ``OTEL_TRACES_SAMPLER`` names (parent-based always-on by default), except
    that a statement span with no parent (a background thread's query: the index watcher,
    the audit writer, the change probe) starts no trace of its own: statement spans show
    inside the request or job that ran them. Ragline makes no other client spans."""
    from opentelemetry.sdk.trace import sampling

    configured = sampling._get_from_env_or_default()

    class NoStatementRoots(sampling.Sampler):
        def should_sample(
            self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None
        ):
            parent = trace.get_current_span(parent_context).get_span_context()
            if kind == trace.SpanKind.CLIENT and not parent.is_valid:
                return sampling.SamplingResult(sampling.Decision.DROP)
            return configured.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )

        def get_description(self) -> str:
            return f"NoStatementRoots({configured.get_description()})"

    return NoStatementRoots()
