"""Spans exported from a child process (core/span_export.py) reach an OTLP/HTTP endpoint as
the same protobuf spans the SDK's in-process encoder makes of them; a full queue drops spans
rather than blocking, a dead child costs the caller nothing, and shutdown ends the child."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from core.span_export import ProcessSpanProcessor, RowSpan, RowTracerProvider, finished_row
from testkit.otlp import OtlpSink


@pytest.fixture
def sink(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpSink]:
    with OtlpSink() as endpoint:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        yield endpoint


RESOURCE = Resource.create({"service.name": "ragline-test", "deployment.environment": "ci"})


def _provider(processor: ProcessSpanProcessor) -> tuple[TracerProvider, InMemorySpanExporter]:
    """A provider feeding the child and, beside it, an in-memory copy of every span."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def test_the_child_exports_the_spans_the_sdk_would_encode(sink: OtlpSink) -> None:
    processor = ProcessSpanProcessor(RESOURCE)
    provider, memory = _provider(processor)
    tracer = provider.get_tracer("ragline", "1.2.3")
    try:
        with tracer.start_as_current_span("POST /v1/retrieve", kind=SpanKind.SERVER) as root:
            root.set_attribute("http.response.status_code", 500)
            root.set_attribute("ragline.stages", ("acl_filter", "dense"))
            attributes = {"ragline.count": 3, "x.ratio": 0.5}
            with tracer.start_as_current_span("retrieve.dense", attributes=attributes):
                pass
            try:
                with tracer.start_as_current_span("retrieve.fetch"):
                    raise ValueError("boom")
            except ValueError:
                pass
            tracer.start_span("linked", links=[Link(root.get_span_context(), {"why": "batch"})]).end()
        assert processor.force_flush(10_000)
    finally:
        provider.shutdown()
    got = sink.resource_spans
    assert got, "nothing reached the endpoint"
    resource = {kv.key: kv.value.string_value for kv in got[0].resource.attributes}
    assert resource.items() >= {"service.name": "ragline-test", "deployment.environment": "ci"}.items()
    sent = {s.span_id: s for rs in got for ss in rs.scope_spans for s in ss.spans}
    scopes = {ss.scope.name + "/" + ss.scope.version for rs in got for ss in rs.scope_spans}
    assert scopes == {"ragline/1.2.3"}
    expected = {
        s.span_id: s
        for rs in encode_spans(memory.get_finished_spans()).resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    }
    assert len(expected) == 4
    assert sent == expected  # protobuf equality: ids, parents, times, attributes, events, links, status
    fetch = next(s for s in sent.values() if s.name == "retrieve.fetch")
    assert fetch.status.code == StatusCode.ERROR.value and [e.name for e in fetch.events] == ["exception"]


def test_a_full_queue_drops_spans_and_never_blocks(sink: OtlpSink, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # the sender sleeps through the test
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "5")
    processor = ProcessSpanProcessor(RESOURCE)
    provider, _ = _provider(processor)
    try:
        tracer = provider.get_tracer("ragline")
        for i in range(12):
            tracer.start_span(f"s{i}").end()
        assert processor.dropped == 7
        assert processor.force_flush(10_000)
    finally:
        provider.shutdown()
    names = sorted(s.name for s in sink.spans)
    assert names == [f"s{i}" for i in range(5)]


def test_a_dead_child_costs_the_caller_nothing(sink: OtlpSink) -> None:
    processor = ProcessSpanProcessor(RESOURCE)
    provider, memory = _provider(processor)
    tracer = provider.get_tracer("ragline")
    try:
        os.kill(processor._child.pid, signal.SIGKILL)
        processor._child.wait(timeout=10)
        for i in range(50):
            tracer.start_span(f"after{i}").end()  # no exception reaches the caller
        started = time.monotonic()
        assert processor.force_flush(10_000) is False
        assert time.monotonic() - started < 5
    finally:
        provider.shutdown()
    assert len(memory.get_finished_spans()) == 50  # the other processors kept working
    assert not sink.spans


def test_shutdown_exports_what_is_left_and_ends_the_child(
    sink: OtlpSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    processor = ProcessSpanProcessor(RESOURCE)
    provider, _ = _provider(processor)
    provider.get_tracer("ragline").start_span("last").end()
    provider.shutdown()
    assert processor._child.poll() == 0
    assert [s.name for s in sink.spans] == ["last"]


def test_a_finished_row_exports_as_the_sdk_span_of_the_same_stage(
    sink: OtlpSink,
) -> None:
    processor = ProcessSpanProcessor(RESOURCE)
    provider, _ = _provider(processor)
    tracer = provider.get_tracer("ragline")
    attrs: dict[str, Any] = {"ragline.stage": "dense", "ragline.count": 4}
    try:
        with tracer.start_as_current_span("retrieve") as parent:
            made = tracer.start_span("retrieve.dense", start_time=1_000, attributes=attrs)
            made.end(end_time=2_500)
            span_id = made.get_span_context().span_id
            processor.on_end_row(
                finished_row("retrieve.dense", parent.get_span_context(), span_id, 1_000, 2_500, attrs)
            )
            unsampled = SpanContext(parent.get_span_context().trace_id, 7, False, TraceFlags(0))
            processor.finished("retrieve.unsampled", unsampled, 1_000, 2_500, attrs)
            processor.finished("retrieve.sampled", parent.get_span_context(), 1_000, 2_500, attrs)
        assert processor.force_flush(10_000)
    finally:
        provider.shutdown()
    dense = [s for s in sink.spans if s.name == "retrieve.dense"]
    assert len(dense) == 2 and dense[0] == dense[1]
    names = [s.name for s in sink.spans]
    assert "retrieve.sampled" in names and "retrieve.unsampled" not in names


def test_a_row_span_exports_as_the_sdk_span_it_stands_for(sink: OtlpSink) -> None:
    """The same calls on an SDK span and on a ``RowSpan`` with its context give the same
    protobuf span: name changes, attributes, an exception event, status rules, end."""
    processor = ProcessSpanProcessor(RESOURCE)
    provider, _ = _provider(processor)
    tracer = provider.get_tracer("ragline")
    remote = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, TraceFlags(1))
    error = ValueError("boom")

    def use(span: trace.Span) -> None:
        span.set_attribute("http.response.status_code", 500)
        span.set_attributes({"ragline.results": 3, "ragline.stages": ("dense", "lexical")})
        span.update_name("POST /v1/retrieve")
        span.record_exception(error, timestamp=5_000, escaped=True)
        span.set_status(StatusCode.UNSET)  # never overrides
        span.set_status(Status(StatusCode.ERROR, "ValueError: boom"))
        span.end(end_time=9_000)
        span.set_attribute("after.end", 1)  # nothing changes once it ended
        span.update_name("renamed")
        span.end(end_time=10_000)

    try:
        sdk = tracer.start_span(
            "POST",
            context=trace.set_span_in_context(trace.NonRecordingSpan(remote)),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST"},
            start_time=1_000,
        )
        use(sdk)
        row = RowSpan(
            processor.on_end_row,
            "POST",
            sdk.get_span_context(),
            remote,
            SpanKind.SERVER,
            {"http.request.method": "POST"},
            (),
            1_000,
        )
        use(row)
        assert not row.is_recording()
        assert processor.force_flush(10_000)
    finally:
        provider.shutdown()
    got = [s for s in sink.spans if s.name == "POST /v1/retrieve"]
    assert len(got) == 2 and got[0] == got[1]
    assert got[0].parent_span_id == remote.span_id.to_bytes(8, "big")
    assert [e.name for e in got[0].events] == ["exception"] and got[0].end_time_unix_nano == 9_000


def test_current_spans_under_ragline_s_provider_are_rows_with_the_sdk_s_parents_and_sampling(
    sink: OtlpSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tracing.current_span`` through ragline's own provider: the server span continues a
    sampled ``traceparent``, ``retrieve`` is its child, a statement span of the row tracer the
    psycopg instrumentation gets is the child of ``retrieve`` (in its own scope), an SDK span of
    the global provider is the statement's child, an escaping exception is recorded; an
    unsampled ``traceparent`` records and exports nothing."""
    from opentelemetry import propagate

    from core import tracing

    processor = ProcessSpanProcessor(RESOURCE)
    provider, memory = _provider(processor)
    processor.bind(provider.sampler, provider.id_generator)
    rows = RowTracerProvider(processor)
    monkeypatch.setattr(tracing, "_rows", processor)
    monkeypatch.setattr(tracing, "_row_tracer", rows.get_tracer("ragline"))
    statements = rows.get_tracer("opentelemetry.instrumentation.psycopg", "0.66b1", "https://schema/1")
    other = provider.get_tracer("another.instrumentation")  # the global SDK provider's spans
    trace_hex, parent_hex = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    try:
        with pytest.raises(RuntimeError, match="late"):
            with tracing.current_span(
                "GET",
                context=propagate.extract({"traceparent": f"00-{trace_hex}-{parent_hex}-01"}),
                kind=SpanKind.SERVER,
                attributes={"http.request.method": "GET"},
            ) as server:
                assert isinstance(server, RowSpan) and tracing.recording()
                assert tracing.current_trace_id() == trace_hex
                with tracing.span("retrieve", **{"ragline.mode": "hybrid"}) as inner:
                    assert isinstance(inner, RowSpan)
                    with statements.start_as_current_span("SELECT", kind=SpanKind.CLIENT) as select:
                        assert isinstance(select, RowSpan)
                        other.start_span("inside").end()
                raise RuntimeError("late")
        with tracing.current_span(
            "GET", context=propagate.extract({"traceparent": f"00-{'1' * 32}-{parent_hex}-00"})
        ) as dropped:
            assert not dropped.is_recording()
            with tracing.span("retrieve") as nothing:
                assert nothing is None
        assert processor.force_flush(10_000)
    finally:
        provider.shutdown()
    by_name = {s.name: s for s in sink.spans}
    assert set(by_name) == {"GET", "retrieve", "SELECT", "inside"}  # nothing of the unsampled request
    get, retrieve, select = by_name["GET"], by_name["retrieve"], by_name["SELECT"]
    assert by_name["inside"].parent_span_id == select.span_id
    scopes = {
        s.name: (ss.scope.name, ss.scope.version, ss.schema_url)
        for rs in sink.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    }
    assert scopes["SELECT"] == ("opentelemetry.instrumentation.psycopg", "0.66b1", "https://schema/1")
    assert scopes["GET"] == ("ragline", "", "")
    assert {s.trace_id.hex() for s in by_name.values()} == {trace_hex}
    assert get.parent_span_id.hex() == parent_hex and get.kind == SpanKind.SERVER.value + 1  # OTLP's enum
    assert retrieve.parent_span_id == get.span_id and select.parent_span_id == retrieve.span_id
    assert get.status.code == StatusCode.ERROR.value and get.status.message == "RuntimeError: late"
    assert [e.name for e in get.events] == ["exception"]
    assert {kv.key: kv.value.string_value for kv in retrieve.attributes} == {"ragline.mode": "hybrid"}
    assert [s.name for s in memory.get_finished_spans()] == ["inside"]  # the rows made no SDK span


def test_the_exporter_child_runs_below_the_server_s_priority(sink: OtlpSink) -> None:
    import psutil

    from core.span_export import EXPORT_NICE

    processor = ProcessSpanProcessor(RESOURCE)
    try:
        assert processor.force_flush(10_000)  # the child has read its first frames: niced by then
        own = psutil.Process().nice()
        assert psutil.Process(processor._child.pid).nice() == min(own + EXPORT_NICE, 19)
    finally:
        processor.shutdown()


def _rows() -> list[tuple[Any, ...]]:
    """Rows covering what ``_encode_rows`` must encode as the SDK does: every kind, a remote
    parent, trace state, events, links (remote and not), every attribute value type, statuses
    with descriptions, and spans of several scopes (one of them none)."""
    trace_id, root = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
    values = {"s": "text", "i": -7, "b": True, "f": 0.25, "none": None, "bytes": b"\x00\x01",
              "strs": ("a", "b"), "ints": [1, 2], "map": {"k": "v", "n": 2}}  # fmt: skip
    rows: list[tuple[Any, ...]] = [
        ("POST /v1/retrieve", trace_id, root, 1, (("vendor", "x1"), ("other", "y")),
         (0x1111, True, 1), SpanKind.SERVER.value, 10, 90, dict(values), StatusCode.ERROR.value,
         "failed", (("exception", 55, {"exception.type": "ValueError"}), ("plain", 56, {})),
         ((trace_id, 0x2222, True, 1, {"why": "batch"}), (0x33, 0x44, False, 0, {})),
         ("opentelemetry.instrumentation.fastapi", "0.66b1", None)),
    ]  # fmt: skip
    ragline = ("ragline", None, None)
    psycopg = ("opentelemetry.instrumentation.psycopg", "0.66b1", "https://opentelemetry.io/schemas/1.11.0")
    for n, kind in enumerate(SpanKind):
        attrs = {"ragline.count": n}
        rows.append((f"stage{n}", trace_id, root + n + 1, 1, (), (root, False, 1), kind.value, 20 + n,
                     30 + n, attrs, StatusCode.UNSET.value, None, (), (), ragline))  # fmt: skip
    rows.append(("SELECT", trace_id, 0x5555, 1, (), (root, False, 1), SpanKind.CLIENT.value, 40, 41,
                 {"db.statement": "SELECT 1"}, StatusCode.OK.value, None, (), (), psycopg))  # fmt: skip
    rows.append(("unscoped", trace_id, 0x6666, 1, (), None, 0, 1, 2, {}, 0, None, (), (), None))
    rows.append(("stage-again", trace_id, 0x7777, 1, (), (root, False, 1), 0, 5, 6, {}, 0, None, (), (),
                 ragline))  # fmt: skip
    return rows


def test_rows_encode_byte_for_byte_as_the_sdk_encodes_the_spans_they_stand_for() -> None:
    from core.span_export import _encode_rows, _span

    rows = _rows()
    for resource in (RESOURCE, Resource({"service.name": "x"}, "https://opentelemetry.io/schemas/1.21.0")):
        expected = encode_spans([_span(row, resource) for row in rows]).SerializePartialToString()
        assert _encode_rows(rows, resource) == expected


def test_an_unencodable_attribute_costs_its_key_not_the_span() -> None:
    from core.span_export import _encode_rows

    row = list(_rows()[1])
    row[9] = {"ok": 1, "bad": object()}
    request = ExportTraceServiceRequest.FromString(_encode_rows([tuple(row)], RESOURCE))
    (span,) = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert [kv.key for kv in span.attributes] == ["ok"]


class _Client:
    def __init__(self) -> None:
        self.posted: list[bytes] = []

    def export(self, data: bytes) -> None:
        self.posted.append(data)


class _Exporter:
    """An exporter shaped as the SDK's: ``export`` of spans, and (where ``client``) the HTTP
    client ``_row_export`` posts encoded requests with."""

    def __init__(self, client: _Client | None, limit: int = 0) -> None:
        if client is not None:
            self._client, self._max_request_size = client, limit
        self.exported: list[Any] = []

    def export(self, spans: Any) -> None:
        self.exported.append(list(spans))


def test_the_child_posts_encoded_rows_through_the_exporter_s_client_within_its_size_limit() -> None:
    from core.span_export import _encode_rows, _row_export

    rows = _rows()
    client = _Client()
    exporter = _Exporter(client)
    _row_export(exporter)(rows, RESOURCE)
    assert client.posted == [_encode_rows(rows, RESOURCE)] and not exporter.exported
    small = _Client()
    _row_export(_Exporter(small, limit=100))(rows, RESOURCE)  # the request is larger: dropped
    assert small.posted == []


def test_an_exporter_without_a_client_gets_the_rows_rebuilt_as_sdk_spans() -> None:
    from core.span_export import _row_export

    exporter = _Exporter(None)
    _row_export(exporter)(_rows(), RESOURCE)
    (batch,) = exporter.exported
    assert [s.name for s in batch] == [row[0] for row in _rows()]
    assert all(s.resource is RESOURCE for s in batch)


def _state(span: Any) -> tuple[Any, ...]:
    """What a caller can tell of a span after a block: its events, status and whether it ended."""
    if isinstance(span, RowSpan):
        events = [name for name, _, _ in span._events]
        return events, span._status.status_code, span._status.description, span._end is not None
    status = span.status
    return [e.name for e in span.events], status.status_code, status.description, span.end_time is not None


@pytest.mark.parametrize("raised", [None, ValueError("boom"), KeyboardInterrupt()])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"end_on_exit": False},
        {"record_exception": False},
        {"set_status_on_exception": False},
    ],
)
def test_a_row_tracer_s_current_span_behaves_as_use_span(
    sink: OtlpSink, raised: BaseException | None, options: dict[str, Any]
) -> None:
    """The row tracer's current-span block (a class, not ``use_span``'s generator) does what the
    SDK tracer's does: the span is current inside and not after; an escaping ``Exception`` is
    recorded with status ERROR (as asked), a ``BaseException`` is not; the span ends on exit
    unless asked not to; the exception always propagates."""
    processor = ProcessSpanProcessor(RESOURCE)
    provider, _ = _provider(processor)
    processor.bind(provider.sampler, provider.id_generator)
    tracers = [provider.get_tracer("ragline"), RowTracerProvider(processor).get_tracer("ragline")]
    states = []
    try:
        for tracer in tracers:
            outside = trace.get_current_span()
            made = None
            with pytest.raises(type(raised)) if raised is not None else contextlib.nullcontext():
                with tracer.start_as_current_span("block", **options) as made:
                    assert trace.get_current_span() is made
                    if raised is not None:
                        raise raised
            assert trace.get_current_span() is outside
            states.append(_state(made))
    finally:
        provider.shutdown()
    assert states[0] == states[1]
    assert isinstance(made, RowSpan)


def test_children_of_a_valid_parent_skip_only_a_default_parent_based_sampler(sink: OtlpSink) -> None:
    """With a parent-based sampler's default delegates, a child of a valid parent is decided by
    the parent's flag without calling the sampler, and comes out as the sampler would make it
    (trace, flags with the random-id bit, trace state, parent, attributes, recording or not);
    a sampler with another delegate, or no parent, still decides through the sampler."""
    from opentelemetry.sdk.trace import sampling
    from opentelemetry.trace.span import TraceState

    from core.tracing import _no_statement_roots

    processor = ProcessSpanProcessor(RESOURCE)
    provider, _ = _provider(processor)
    try:
        state = TraceState([("vendor", "x1")])
        parents = [
            SpanContext(0xA1, 0xB1, False, TraceFlags(TraceFlags.SAMPLED)),
            SpanContext(0xA2, 0xB2, False, TraceFlags(TraceFlags.DEFAULT)),
            SpanContext(0xA3, 0xB3, True, TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID), state),
            SpanContext(0xA4, 0xB4, True, TraceFlags(TraceFlags.DEFAULT), state),
        ]

        def made(parent: SpanContext, fast: bool) -> tuple[Any, ...]:
            processor._parent_decides = fast
            span = processor.start_span(
                "child", trace.set_span_in_context(trace.NonRecordingSpan(parent)), attributes={"k": 1}
            )
            ctx = span.get_span_context()
            flags = int(ctx.trace_flags)
            fields: tuple[Any, ...] = (type(span), ctx.trace_id, flags, ctx.trace_state, ctx.is_remote)
            if isinstance(span, RowSpan):
                fields += (span._parent, span._attrs)
            return fields

        for sampler in (provider.sampler, _no_statement_roots(), sampling.ParentBasedTraceIdRatio(0.1)):
            processor.bind(sampler, provider.id_generator)
            assert processor._parent_decides
            for parent in parents:
                assert made(parent, True) == made(parent, False)
            assert made(parents[0], True)[0] is RowSpan
            assert made(parents[1], True)[0] is trace.NonRecordingSpan

        class Counting(sampling.Sampler):
            calls = 0

            def should_sample(self, *args: Any, **kwargs: Any) -> sampling.SamplingResult:
                Counting.calls += 1
                return sampling.SamplingResult(sampling.Decision.DROP)

            def get_description(self) -> str:
                return "Counting"

        custom = sampling.ParentBased(sampling.ALWAYS_ON, local_parent_sampled=Counting())
        processor.bind(custom, provider.id_generator)
        assert not processor._parent_decides
        processor._parent_decides = False
        span = processor.start_span("child", trace.set_span_in_context(trace.NonRecordingSpan(parents[0])))
        assert Counting.calls == 1 and not span.is_recording()  # the custom delegate decided
        processor.bind(sampling.ParentBased(Counting()), provider.id_generator)
        assert processor._parent_decides
        processor.start_span("root", trace.set_span_in_context(trace.INVALID_SPAN))
        assert Counting.calls == 2  # no parent: the root sampler decides
    finally:
        provider.shutdown()
