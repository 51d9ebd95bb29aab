"""Finished spans exported by a child process, so the OTLP encoding and the HTTP posts run
outside the server's interpreter (and its GIL).

The SDK's ``BatchSpanProcessor`` encodes every span to protobuf and posts it from a thread of
the serving process: about 40 µs of a request's GIL time per span, paid by whichever requests
are in flight when the batch goes out. ``ProcessSpanProcessor`` keeps the request's side to a
queue append: ragline's own spans are rows (plain tuples: ``RowSpan``, ``finished_row``)
marshalled as they end, about 1 µs each, an SDK span is queued as it is; a sender thread
marshals what is not yet bytes once a schedule delay and writes the batch to a pipe; the child (``python -m
core.span_export``) encodes the rows straight to the OTLP protobuf request (``_encode_rows``:
the bytes the SDK's encoder makes of the same spans, without building them as SDK objects)
and posts it with the standard ``OTLPSpanExporter``'s HTTP client, which reads its endpoint,
headers, timeout, compression and retries from the ``OTEL_EXPORTER_OTLP_*`` variables as it
would in-process. What reaches the collector is the same OTLP request the in-process exporter
would send, less the counts of attributes, events and links the SDK's limits dropped
(ragline's spans stay far below those limits).

The standard ``OTEL_BSP_*`` variables keep their meaning: schedule delay, queue size (spans
beyond it are dropped and counted, never blocking a request) and export batch size. The child
ends when its pipe closes, so it cannot outlive the server; a child that dies is logged once and
its spans are dropped from then on, and a request never waits on it. ``force_flush`` waits for
the child to say it has exported what was sent (tests and shutdown rely on that).
"""

from __future__ import annotations

import logging
import marshal
import os
import random
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Mapping, Sequence
from typing import IO, Any

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope as PBScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as PBResource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, SpanFlags
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PBSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PBStatus
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanContext, SpanKind, StatusCode, TraceFlags
from opentelemetry.trace.status import Status
from opentelemetry.util.types import Attributes, AttributeValue

log = logging.getLogger(__name__)

_FRAME = struct.Struct("!I")
_SPANS, _FLUSH, _RESOURCE = 0, 1, 2
_ACK = b"\x06"
EXPORT_NICE = 10  # the child's niceness above the server's
# How ParentBased describes its default delegates for a valid parent (opentelemetry-sdk).
_DEFAULT_DELEGATES = (
    "remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,"
    "localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"
)


def _env_number(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, "") or default)
    except ValueError:
        log.warning("%s=%r is not a whole number: using %d", name, os.environ[name], default)
        return default
    return value if value > 0 else default


def _row(span: ReadableSpan) -> tuple[Any, ...]:
    """A finished span as the plain values ``marshal`` can write (the child's ``_span`` reads them)."""
    scope = span.instrumentation_scope
    return _make_row(
        span.name,
        span.context,
        span.parent,
        span.kind,
        span.start_time or 0,
        span.end_time or 0,
        dict(span.attributes or {}),
        span.status,
        tuple((e.name, e.timestamp, dict(e.attributes or {})) for e in span.events),
        _link_rows(span.links),
        None if scope is None else (scope.name, scope.version, scope.schema_url),
    )


def _make_row(
    name: str,
    ctx: SpanContext,
    parent: SpanContext | None,
    kind: SpanKind,
    start_ns: int,
    end_ns: int,
    attributes: dict[str, Any],
    status: Status,
    events: tuple[Any, ...],
    links: tuple[Any, ...],
    scope: tuple[str, str | None, str | None] | None,
) -> tuple[Any, ...]:
    return (
        name,
        ctx.trace_id,
        ctx.span_id,
        int(ctx.trace_flags),
        tuple(ctx.trace_state.items()) if ctx.trace_state else (),
        None if parent is None else (parent.span_id, parent.is_remote, int(parent.trace_flags)),
        kind.value,
        start_ns,
        end_ns,
        attributes,
        status.status_code.value,
        status.description,
        events,
        links,
        scope,
    )


def _link_rows(links: Sequence[trace.Link]) -> tuple[Any, ...]:
    return tuple(
        (c.trace_id, c.span_id, c.is_remote, int(c.trace_flags), dict(ln.attributes or {}))
        for ln in links
        for c in (ln.context,)
    )


def finished_row(
    name: str, parent: SpanContext, span_id: int, start_ns: int, end_ns: int, attributes: dict[str, Any]
) -> tuple[Any, ...]:
    """The row ``_row`` makes of a span that ended as it started: an internal child of
    ``parent`` in its trace and sampling decision (as the parent-based samplers decide), status
    unset, no events or links, scope ``ragline``: what ``stage_span`` and ``batch_spans``
    record, with no SDK span object built and dropped."""
    flags = int(parent.trace_flags)
    return (
        name,
        parent.trace_id,
        span_id,
        flags,
        tuple(parent.trace_state.items()) if parent.trace_state else (),
        (parent.span_id, parent.is_remote, flags),
        SpanKind.INTERNAL.value,
        start_ns,
        end_ns,
        attributes,
        StatusCode.UNSET.value,
        None,
        (),
        (),
        ("ragline", None, None),
    )


class RowSpan(trace.Span):
    """A recording span that becomes one row on the export queue when it ends, with no SDK span
    object: for the spans that are current while a request's work runs inside them (the server
    span, ``retrieve``, a job's), where the SDK's span costs its attribute checks, lock and
    processor calls (about 55 µs to start and end one on this machine, measured with a
    throwaway microbenchmark). Made by ``ProcessSpanProcessor.start_span`` with the provider's
    own sampler and ids; other instrumentations (psycopg) read its context as any span's.

    It follows the SDK's span where a caller can tell: attributes and name may change until it
    ends, an exception is an ``exception`` event with the SDK's attributes, a status of OK is
    final and UNSET never overrides, and nothing changes after ``end``.
    """

    __slots__ = ("_on_end", "_name", "_context", "_parent", "_kind", "_attrs", "_start", "_end", "_status",
                 "_events", "_links", "_scope")  # fmt: skip

    def __init__(
        self,
        on_end: Any,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        links: tuple[Any, ...],
        start_ns: int,
        scope: tuple[str, str | None, str | None] = ("ragline", None, None),
    ) -> None:
        self._on_end = on_end
        self._scope = scope
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._attrs = attributes
        self._links = links
        self._start = start_ns
        self._end: int | None = None
        self._status = Status(StatusCode.UNSET)
        self._events: list[tuple[str, int, dict[str, Any]]] = []

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end is None

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        if self._end is None:
            self._attrs.update(attributes)

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        if self._end is None:
            self._attrs[key] = value

    def add_event(self, name: str, attributes: Attributes = None, timestamp: int | None = None) -> None:
        if self._end is None:
            self._events.append((name, timestamp or time.time_ns(), dict(attributes or {})))

    def update_name(self, name: str) -> None:
        if self._end is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end is not None or self._status.status_code is StatusCode.OK:
            return
        new = status if isinstance(status, Status) else Status(status, description)
        if new.status_code is not StatusCode.UNSET:
            self._status = new

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        module, qualname = type(exception).__module__, type(exception).__qualname__
        attrs: dict[str, Any] = {
            "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        attrs.update(attributes or {})
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end is not None:
            return
        self._end = end_time or time.time_ns()
        if not self._context.trace_flags.sampled:
            return
        self._on_end(
            _make_row(
                self._name,
                self._context,
                self._parent,
                self._kind,
                self._start,
                self._end,
                self._attrs,
                self._status,
                tuple(self._events),
                self._links,
                self._scope,
            )
        )


class RowTracer(trace.Tracer):
    """A tracer of ``RowSpan``s for one instrumentation scope (``RowTracerProvider``)."""

    def __init__(self, processor: ProcessSpanProcessor, scope: tuple[str, str | None, str | None]) -> None:
        self._processor = processor
        self._scope = scope

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[trace.Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        return self._processor.start_span(name, context, kind, attributes, links, start_time, self._scope)

    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[trace.Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> _CurrentSpan:
        """As the SDK's: the span current inside the block (as ``use_span``: an escaping
        exception is recorded and sets status ERROR), ended at its end."""
        made = self._processor.start_span(name, context, kind, attributes, links, start_time, self._scope)
        return _CurrentSpan(made, end_on_exit, record_exception, set_status_on_exception)


class _CurrentSpan:
    """``trace.use_span`` as a class: the API's is a generator context manager, and the
    tracer wrapped it in another; a block around a row span took 10.4-11.7 µs that way and
    8.4-9.9 µs this way (a throwaway microbenchmark on this machine), and every request makes
    several (its server span, ``retrieve``, each statement's). Same order and rules: the span
    is detached first; then an escaping ``Exception`` (not a ``BaseException`` such as a
    cancellation) is recorded on a recording span with status ERROR ``"<type>: <message>"``;
    then the span ends when ``end_on_exit``."""

    __slots__ = ("_span", "_token", "_end_on_exit", "_record", "_set_status")

    def __init__(self, span: trace.Span, end_on_exit: bool, record: bool, set_status: bool) -> None:
        self._span = span
        self._end_on_exit = end_on_exit
        self._record = record
        self._set_status = set_status

    def __enter__(self) -> trace.Span:
        self._token = context_api.attach(trace.set_span_in_context(self._span))
        return self._span

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        span = self._span
        try:
            context_api.detach(self._token)
            if isinstance(exc, Exception) and span.is_recording():
                if self._record:
                    span.record_exception(exc)
                if self._set_status:
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            if self._end_on_exit:
                span.end()


class RowTracerProvider(trace.TracerProvider):
    """Tracers whose spans are rows of ``processor`` (its ``bind``: the SDK provider's sampler
    and ids): handed to ragline's own spans and to the psycopg instrumentation's statement
    spans, while the global provider stays the SDK's for everything else."""

    def __init__(self, processor: ProcessSpanProcessor) -> None:
        self._processor = processor
        self._tracers: dict[tuple[str, str | None, str | None], RowTracer] = {}

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> RowTracer:
        scope = (instrumenting_module_name, instrumenting_library_version, schema_url)
        tracer = self._tracers.get(scope)
        if tracer is None:
            tracer = self._tracers[scope] = RowTracer(self._processor, scope)
        return tracer


class ProcessSpanProcessor(SpanProcessor):
    """Batches sampled, finished spans and sends them to a child process that exports them."""

    def __init__(self, resource: Resource, *, command: Sequence[str] | None = None) -> None:
        self._delay_s = _env_number("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._max_queue = _env_number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self._max_batch = _env_number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
        self._timeout_s = _env_number("OTEL_BSP_EXPORT_TIMEOUT", 30000) / 1000
        self._queue: deque[ReadableSpan | bytes] = deque()  # append and popleft are atomic: no lock
        self._lock = threading.Lock()  # one writer on the pipe at a time
        self._wake = threading.Event()
        self._acked = threading.Condition()
        self._acks = 0
        self.dropped = 0
        self._broken = False
        self._closed = False
        self._child = subprocess.Popen(
            list(command or [sys.executable, "-m", "core.span_export"]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert self._child.stdin is not None and self._child.stdout is not None
        self._pipe: IO[bytes] = self._child.stdin
        attrs = dict(resource.attributes)
        self._write(_RESOURCE, (attrs, resource.schema_url))
        threading.Thread(target=self._read_acks, args=(self._child.stdout,), daemon=True).start()
        self._sender = threading.Thread(target=self._send_loop, name="span-export", daemon=True)
        self._sender.start()

    # --- the request's side ---------------------------------------------------------------

    def bind(self, sampler: Any, id_generator: Any) -> None:
        """The provider's sampler and id generator, for ``start_span`` (``install_provider``)."""
        self._sampler = sampler
        self._ids = id_generator
        # A parent-based sampler with the default delegates decides a child of a valid parent
        # by the parent's sampled flag alone (ALWAYS_ON / ALWAYS_OFF, the parent's trace
        # state): start_span then skips the call (3.0-3.4 µs a span instead of 6.3-7.0). Read
        # from the sampler's public description (its own, or ragline's wrapper's:
        # core/tracing.py), so custom delegates keep the sampler's own decision.
        described = sampler.get_description()
        self._parent_decides = described.startswith(("ParentBased{", "NoStatementRoots(ParentBased{")) and (
            described.rstrip(")").endswith(_DEFAULT_DELEGATES)
        )

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, AttributeValue] | None = None,
        links: Sequence[trace.Link] | None = (),
        start_time: int | None = None,
        scope: tuple[str, str | None, str | None] = ("ragline", None, None),
    ) -> trace.Span:
        """A span as the SDK's tracer would start it (the provider's sampler decides, a valid
        parent in ``context`` or the current one gives the trace), made as a ``RowSpan``; a
        span the sampler drops is a non-recording span carrying the new context."""
        parent = trace.get_current_span(context).get_span_context()
        links = links or ()
        parent_or_none: SpanContext | None = parent if parent.is_valid else None
        if parent_or_none is not None and self._parent_decides:  # the default delegates' decision
            trace_id, trace_state = parent.trace_id, parent.trace_state
            flags = parent.trace_flags & (TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
            recording, passed = parent.trace_flags.sampled, attributes
        else:
            if parent_or_none is not None:
                trace_id, random_id = parent.trace_id, parent.trace_flags.random_trace_id
            else:
                trace_id, random_id = self._ids.generate_trace_id(), self._ids.is_trace_id_random()
            result = self._sampler.should_sample(context, trace_id, name, kind, attributes, links)
            flags = TraceFlags.SAMPLED if result.decision.is_sampled() else TraceFlags.DEFAULT
            if random_id:
                flags |= TraceFlags.RANDOM_TRACE_ID
            trace_state, passed = result.trace_state, result.attributes
            recording = result.decision.is_recording()
        ctx = SpanContext(trace_id, self._ids.generate_span_id(), False, TraceFlags(flags), trace_state)
        if not recording:
            return trace.NonRecordingSpan(ctx)
        attrs = dict(passed or {})  # as the SDK: what the sampler passed on (all, by default)
        start_ns = time.time_ns() if start_time is None else start_time
        return RowSpan(
            self.on_end_row, name, ctx, parent_or_none, kind, attrs, _link_rows(links), start_ns, scope
        )

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        return

    def on_end(self, span: ReadableSpan) -> None:
        if span.context.trace_flags.sampled:
            self._enqueue(span)

    def on_end_row(self, row: tuple[Any, ...]) -> None:
        """``on_end`` for a span already made a row (``finished_row``, a ``RowSpan``'s end): it
        is queued marshalled (about 1 µs), so the queue holds bytes that the garbage collector
        does not track rather than containers that would live through its generations until
        the next send."""
        self._enqueue(marshal.dumps(row))

    def finished(
        self, name: str, parent: SpanContext, start_ns: int, end_ns: int, attributes: dict[str, Any]
    ) -> None:
        """A finished child span of ``parent`` (a stage, a batch), queued as a row with a new
        span id; nothing when the parent is not sampled (the SDK would not export it either)."""
        if parent.trace_flags.sampled:
            span_id = random.getrandbits(64) or 1
            self.on_end_row(finished_row(name, parent, span_id, start_ns, end_ns, attributes))

    def _enqueue(self, item: ReadableSpan | bytes) -> None:
        queue = self._queue
        if self._closed:
            return
        if len(queue) >= self._max_queue:
            self.dropped += 1
            return
        queue.append(item)
        if len(queue) >= self._max_batch:
            self._wake.set()

    # --- the sender thread ----------------------------------------------------------------

    def _send_loop(self) -> None:
        while not self._closed:
            self._wake.wait(self._delay_s)
            self._wake.clear()
            self._send_queued()

    def _send_queued(self) -> None:
        queue = self._queue
        with self._lock:
            while queue and not self._broken:
                batch = [queue.popleft() for _ in range(min(len(queue), self._max_batch))]
                self._write(_SPANS, [s if isinstance(s, bytes) else marshal.dumps(_row(s)) for s in batch])

    def _write(self, kind: int, payload: Any) -> None:
        data = marshal.dumps((kind, payload))
        try:
            self._pipe.write(_FRAME.pack(len(data)) + data)
            self._pipe.flush()
        except (BrokenPipeError, OSError, ValueError):
            if not self._broken:
                log.warning("the span export process is gone (exit %s): spans dropped", self._child.poll())
            self._broken = True

    def _read_acks(self, out: IO[bytes]) -> None:
        while out.read(1) == _ACK:
            with self._acked:
                self._acks += 1
                self._acked.notify_all()
        with self._acked:
            self._broken = True
            self._acked.notify_all()

    # --- flush and shutdown ---------------------------------------------------------------

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Send what is queued and wait until the child has exported it (False on timeout or
        a child that is gone)."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._acked:
            wanted = self._acks + 1
        self._send_queued()
        with self._lock:
            self._write(_FLUSH, None)
        with self._acked:
            while self._acks < wanted and not self._broken:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._acked.wait(left)
            return self._acks >= wanted

    def shutdown(self) -> None:
        if self._closed:
            return
        self.force_flush(int(self._timeout_s * 1000))
        self._closed = True
        self._wake.set()
        try:
            self._pipe.close()
        except OSError:
            pass
        try:
            self._child.wait(timeout=self._timeout_s)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()


# --- the child -----------------------------------------------------------------------------


def _encode_value(value: Any) -> Any:
    """An attribute value as OTLP's ``AnyValue`` (the SDK encoder's rules: bool before int,
    sequences as arrays, mappings as key-value lists)."""
    if value is None:
        return AnyValue()
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, Sequence):
        return AnyValue(array_value=ArrayValue(values=[_encode_value(v) for v in value]))
    if isinstance(value, Mapping):
        pairs = [KeyValue(key=str(k), value=_encode_value(v)) for k, v in value.items()]
        return AnyValue(kvlist_value=KeyValueList(values=pairs))
    raise TypeError(f"invalid attribute value of type {type(value).__name__}")


def _encode_attributes(attributes: Mapping[str, Any] | None) -> list[Any]:
    out = []
    for key, value in (attributes or {}).items():
        try:
            out.append(KeyValue(key=key, value=_encode_value(value)))
        except Exception as error:  # as the SDK: one bad value costs its key, not the span
            log.error("attribute %s not exported: %s", key, error)
    return out


def _encode_rows(rows: Sequence[Sequence[Any]], resource: Resource) -> bytes:
    """Rows (``_make_row``) as the serialized ``ExportTraceServiceRequest`` the SDK's encoder
    makes of the same spans rebuilt as ``ReadableSpan``s (``_span``), byte for byte (a unit test
    compares the two), without building those objects: 0.41x the child's CPU a span
    (``python -m bench.tracing --encode 200``, docs/benchmarks.md)."""
    has_remote = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    is_remote = has_remote | SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
    by_scope: dict[Any, list[Any]] = {}
    for row in rows:
        (name, trace_id, span_id, _flags, state, parent, kind, start, end, attrs, code, description,
         events, links, scope) = row  # fmt: skip
        span = PBSpan(
            trace_id=trace_id.to_bytes(16, "big"),
            span_id=span_id.to_bytes(8, "big"),
            trace_state=",".join(f"{k}={v}" for k, v in state),
            parent_span_id=b"" if parent is None else parent[0].to_bytes(8, "big"),  # b"": unset
            name=name,
            kind=kind + 1,  # SpanKind.INTERNAL is 0, OTLP's SPAN_KIND_INTERNAL 1, and so on
            start_time_unix_nano=start,
            end_time_unix_nano=end,
            attributes=_encode_attributes(attrs),
            events=[
                PBSpan.Event(name=e_name, time_unix_nano=stamp, attributes=_encode_attributes(e_attrs))
                for e_name, stamp, e_attrs in events
            ],
            links=[
                PBSpan.Link(
                    trace_id=t.to_bytes(16, "big"),
                    span_id=s.to_bytes(8, "big"),
                    attributes=_encode_attributes(a),
                    flags=is_remote if remote else has_remote,
                )
                for t, s, remote, _f, a in links
            ],
            status=PBStatus(code=code, message=description),
            flags=is_remote if parent is not None and parent[1] else has_remote,
        )
        spans = by_scope.get(scope)
        if spans is None:
            spans = by_scope[scope] = []
        spans.append(span)
    scope_spans = [
        ScopeSpans(
            scope=PBScope() if scope is None else PBScope(name=scope[0], version=scope[1]),
            spans=spans,
            schema_url="" if scope is None else scope[2] or "",  # "": unset, as None
        )
        for scope, spans in by_scope.items()
    ]
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=PBResource(attributes=_encode_attributes(resource.attributes)),
                scope_spans=scope_spans,
                schema_url=resource.schema_url,
            )
        ]
    )
    return request.SerializePartialToString()


def _span(row: Sequence[Any], resource: Resource) -> ReadableSpan:
    from opentelemetry.sdk.trace import Event
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, TraceFlags, TraceState
    from opentelemetry.trace.status import Status

    (name, trace_id, span_id, flags, state, parent, kind, start, end, attrs, code, description,
     events, links, scope) = row  # fmt: skip
    context = SpanContext(trace_id, span_id, False, TraceFlags(flags), TraceState(list(state)))
    parent_context = (
        None if parent is None else SpanContext(trace_id, parent[0], parent[1], TraceFlags(parent[2]))
    )
    return ReadableSpan(
        name=name,
        context=context,
        parent=parent_context,
        resource=resource,
        attributes=attrs,
        events=[Event(e_name, e_attrs, timestamp) for e_name, timestamp, e_attrs in events],
        links=[Link(SpanContext(t, s, r, TraceFlags(f)), a) for t, s, r, f, a in links],
        kind=SpanKind(kind),
        status=Status(StatusCode(code), description),
        start_time=start,
        end_time=end,
        instrumentation_scope=None if scope is None else InstrumentationScope(*scope),
    )


def _read_frame(stream: IO[bytes]) -> tuple[int, Any] | None:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    (size,) = _FRAME.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        return None
    kind, payload = marshal.loads(data)
    return kind, payload


def _row_export(exporter: Any) -> Any:
    """How the child exports a batch of rows: encoded by ``_encode_rows`` and posted by the
    exporter's own HTTP client (its endpoint, headers, compression, timeout, TLS and retries,
    all from the ``OTEL_EXPORTER_OTLP_*`` variables), with the exporter's request-size limit;
    where an exporter release has no such client, the rows are rebuilt as SDK spans and handed
    to ``exporter.export`` (the same request, at about 2.4 times the CPU)."""
    client = getattr(exporter, "_client", None)
    limit = getattr(exporter, "_max_request_size", 0)
    if not callable(getattr(client, "export", None)) or not isinstance(limit, int):
        log.info("this OTLP exporter has no client for encoded requests: spans are rebuilt")

        def rebuilt(rows: list[Sequence[Any]], resource: Resource) -> None:
            exporter.export([_span(row, resource) for row in rows])

        return rebuilt

    post = client.export  # type: ignore[union-attr]  # callable: checked above

    def encoded(rows: list[Sequence[Any]], resource: Resource) -> None:
        data = _encode_rows(rows, resource)
        if 0 < limit < len(data):
            log.warning(
                "export of %d spans dropped: %d bytes exceed the limit %d", len(rows), len(data), limit
            )
            return
        post(data)  # it logs a failure itself, as the exporter's ``export`` does

    return encoded


def main() -> None:
    """Read frames from stdin until it closes; export each batch of spans with the OTLP/HTTP
    exporter the ``OTEL_EXPORTER_OTLP_*`` variables configure; answer each flush on stdout."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    logging.basicConfig(level=logging.WARNING, format="span-export: %(levelname)s %(message)s")
    # Background work: a busy server's request threads come first (CFS weight ~10x); the
    # queue bounds what waits (a full queue drops and counts spans, never blocks a request).
    try:
        os.nice(EXPORT_NICE)
    except OSError:
        log.warning("could not lower the exporter's priority")
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    exporter = OTLPSpanExporter()
    export = _row_export(exporter)
    resource = Resource.create({})
    while (frame := _read_frame(stdin)) is not None:
        kind, payload = frame
        if kind == _RESOURCE:
            attrs, schema_url = payload
            resource = Resource(attrs, schema_url)
        elif kind == _SPANS:
            try:
                export([marshal.loads(row) for row in payload], resource)
            except Exception:  # a collector that is down must not end the exporter
                log.exception("export failed: %d spans dropped", len(payload))
        elif kind == _FLUSH:
            stdout.write(_ACK)
            stdout.flush()
    exporter.shutdown()


if __name__ == "__main__":
    main()
