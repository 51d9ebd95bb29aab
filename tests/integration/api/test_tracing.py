"""OpenTelemetry traces through a real app: one trace per request, a span per retrieve stage
under it, the trace id in error bodies and log lines, nothing of the query or the principal in
any attribute, and no span at all while tracing is off."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from core.logging import JsonFormatter
from core.settings import Settings
from tests.integration.api.conftest import full_settings, make_key, serving_client, wait_job
from wiring.tracing import tracing_enabled

pytestmark = pytest.mark.integration

DOCS = [
    {"external_id": "keys", "text": "Rotate the signing keys in the vault every ninety days."},
    {"external_id": "lunch", "text": "Monday soup, Tuesday pasta, Wednesday fish and chips."},
]
QUERY = "rotate signing keys"
PRINCIPAL = "user:alice-tracing"
STAGES = {"acl_filter", "embed", "lexical", "dense", "fusion", "fetch", "packing"}

_EXPORTER = InMemorySpanExporter()
_RECORDING: set[int] = set()  # the providers _EXPORTER is attached to (by id)


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """The process's tracer provider, recording in memory. The SDK allows one provider per
    process, so where another test module of this process installed an SDK provider first
    (test_shard_tracing does, on the same xdist worker), the exporter is attached to it."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        pytest.skip("another tracer provider is installed in this process")
    if id(provider) not in _RECORDING:
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        _RECORDING.add(id(provider))
    return _EXPORTER


@pytest.fixture
def traced_client(db_url: str, tmp_path: Path, embedder, exporter) -> Iterator[TestClient]:
    yield from serving_client(full_settings(db_url, tmp_path, tracing={"enabled": True}), embedder)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _ingest(client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    docs = [{**d, "acl": {"public": True}} for d in DOCS]
    resp = client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest))
    assert resp.status_code == 202, resp.text
    assert wait_job(client, ingest, resp.json()["job_id"])["state"] == "succeeded"


def _attribute_text(spans: tuple[ReadableSpan, ...]) -> str:
    return json.dumps([{**dict(s.attributes or {}), "name": s.name} for s in spans]).lower()


def test_one_trace_per_request_with_a_span_per_stage(
    traced_client: TestClient, db_url: str, exporter: InMemorySpanExporter
) -> None:
    _ingest(traced_client, db_url)
    reader = make_key(db_url, "acme", ["query"], principal=PRINCIPAL)
    exporter.clear()
    resp = traced_client.post("/v1/retrieve", json={"query": QUERY}, headers=_auth(reader))
    assert resp.status_code == 200, resp.text
    assert resp.json()["results"][0]["document_external_id"] == "keys"
    finished = exporter.get_finished_spans()
    servers = [s for s in finished if s.kind == SpanKind.SERVER]
    assert len(servers) == 1, [(s.name, getattr(s.instrumentation_scope, "name", None)) for s in servers]
    server = servers[0]
    # The test's provider samples everything: a background thread's statements (the index
    # watcher's) root traces of their own here, where ragline's own provider drops them.
    spans = tuple(s for s in finished if s.context.trace_id == server.context.trace_id)
    assert not [
        s for s in finished if s.context.trace_id != server.context.trace_id and s.kind != SpanKind.CLIENT
    ]
    assert server.name == "POST /v1/retrieve"
    assert server.attributes is not None and server.attributes["http.response.status_code"] == 200
    (retrieve,) = [s for s in spans if s.name == "retrieve"]
    assert retrieve.parent is not None and retrieve.parent.span_id == server.context.span_id
    assert retrieve.attributes is not None
    assert retrieve.attributes["ragline.index_version"] == resp.json()["index_version"]
    stages = {s.name.removeprefix("retrieve."): s for s in spans if s.name.startswith("retrieve.")}
    assert STAGES <= set(stages), sorted(stages)
    for stage in stages.values():
        assert stage.parent is not None and stage.parent.span_id == retrieve.context.span_id
        assert stage.start_time is not None and stage.end_time is not None
        assert retrieve.start_time is not None and retrieve.end_time is not None
        assert retrieve.start_time <= stage.start_time + 1_000_000  # within the parent (1 ms clock slack)
        assert stage.end_time <= retrieve.end_time + 1_000_000
    # The query embedder's batch joins the trace of each request it served, with its size.
    batches = [s for s in spans if s.name == "query_embedder.batch"]
    assert len(batches) == 1 and batches[0].attributes is not None
    assert (
        batches[0].attributes["ragline.batch.items"] == 1
        and batches[0].attributes["ragline.batch.requests"] == 1
    )
    assert batches[0].parent is not None and batches[0].parent.span_id in {
        retrieve.context.span_id,
        server.context.span_id,
    }
    # PostgreSQL statements of the request, as CLIENT spans in its trace: text, no parameters.
    statements = [
        s for s in spans if s.kind == SpanKind.CLIENT and s.attributes and "db.statement" in s.attributes
    ]
    assert statements, sorted({s.name for s in spans})
    assert all(s.attributes is not None and s.attributes.get("db.system") == "postgresql" for s in statements)
    assert not any("db.statement.parameters" in (s.attributes or {}) for s in statements)
    text = _attribute_text(spans)
    for secret in ("rotate", "signing", PRINCIPAL, "vault", reader):
        assert secret.lower() not in text


def test_error_bodies_and_logs_carry_the_trace_id(
    traced_client: TestClient, db_url: str, exporter: InMemorySpanExporter
) -> None:
    reader = make_key(db_url, "acme", ["query"], principal=PRINCIPAL)
    for resp in (
        traced_client.post("/v1/retrieve", json={"query": QUERY, "top_k": -1}, headers=_auth(reader)),
        traced_client.post("/v1/retrieve", json={"query": QUERY}),  # no key: 401
    ):
        assert resp.status_code in (401, 422), resp.text
        trace_id = resp.json()["error"]["trace_id"]
        assert resp.json()["error"]["request_id"] == resp.headers["x-request-id"]
        (server,) = [
            s
            for s in exporter.get_finished_spans()
            if s.kind == SpanKind.SERVER and trace.format_trace_id(s.context.trace_id) == trace_id
        ]
        assert server.attributes is not None
        assert server.attributes["http.response.status_code"] == resp.status_code
    # An incoming W3C traceparent is continued.
    parent = "0af7651916cd43dd8448eb211c80319c"
    resp = traced_client.post(
        "/v1/retrieve", json={"query": QUERY}, headers={"traceparent": f"00-{parent}-b7ad6b7169203331-01"}
    )
    assert resp.json()["error"]["trace_id"] == parent
    # A log line written inside a span names its trace next to the request id.
    with trace.get_tracer("test").start_as_current_span("t") as span:
        record = logging.LogRecord("ragline", logging.INFO, __file__, 1, "hello", None, None)
        line = json.loads(JsonFormatter().format(record))
    assert line["trace_id"] == trace.format_trace_id(span.get_span_context().trace_id)
    assert "request_id" in line


def test_no_span_while_tracing_is_off(
    full_client: TestClient, db_url: str, exporter: InMemorySpanExporter
) -> None:
    _ingest(full_client, db_url)
    reader = make_key(db_url, "acme", ["query"], principal=PRINCIPAL)
    exporter.clear()
    assert full_client.post("/v1/retrieve", json={"query": QUERY}, headers=_auth(reader)).status_code == 200
    bad = full_client.post("/v1/retrieve", json={"query": QUERY})
    assert bad.status_code == 401 and "trace_id" not in bad.json()["error"]
    assert exporter.get_finished_spans() == ()


def test_tracing_is_off_unless_configured(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert not tracing_enabled(settings, {})
    assert tracing_enabled(settings, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing_enabled(settings, {"OTEL_TRACES_EXPORTER": "otlp"})
    assert not tracing_enabled(settings, {"OTEL_TRACES_EXPORTER": "none"})
    on = Settings(data_dir=tmp_path, tracing={"enabled": True})
    assert tracing_enabled(on, {})
    assert not tracing_enabled(on, {"OTEL_SDK_DISABLED": "true"})


def test_an_ingest_job_continues_the_push_trace(
    traced_client: TestClient, db_url: str, exporter: InMemorySpanExporter
) -> None:
    """The job a push queued runs in the push's trace: an ``ingest.job`` span, a span per
    batch under it with its counts, and the job's PostgreSQL statements; no document text."""
    exporter.clear()
    _ingest(traced_client, db_url)
    finished = exporter.get_finished_spans()
    (push,) = [s for s in finished if s.kind == SpanKind.SERVER and s.name == "POST /v1/documents"]
    trace_spans = [s for s in finished if s.context.trace_id == push.context.trace_id]
    (job,) = [s for s in trace_spans if s.name == "ingest.job"]
    assert job.attributes is not None and job.attributes["ragline.job.kind"] == "ingest"
    batches = [s for s in trace_spans if s.name == "ingest.batch"]
    assert batches and all(b.parent is not None and b.parent.span_id == job.context.span_id for b in batches)
    counts = [dict(b.attributes or {}) for b in batches]
    assert sum(int(str(c["ragline.batch.documents"])) for c in counts) == len(DOCS)
    assert all(int(str(c["ragline.batch.chunks"])) >= 1 for c in counts)
    assert any(s.kind == SpanKind.CLIENT for s in trace_spans)  # the job's statements
    text = _attribute_text(tuple(trace_spans))
    assert "vault" not in text and "fish and chips" not in text


def test_the_query_is_on_the_span_only_where_its_storage_is_on(
    db_url: str,
    tmp_path: Path,
    embedder,
    exporter: InMemorySpanExporter,
) -> None:
    settings = full_settings(db_url, tmp_path, tracing={"enabled": True}, audit={"store_query_text": True})
    for client in serving_client(settings, embedder):
        _ingest(client, db_url)
        reader = make_key(db_url, "acme", ["query"], principal=PRINCIPAL)
        exporter.clear()
        assert client.post("/v1/retrieve", json={"query": QUERY}, headers=_auth(reader)).status_code == 200
        (retrieve,) = [s for s in exporter.get_finished_spans() if s.name == "retrieve"]
        assert retrieve.attributes is not None and retrieve.attributes["ragline.query"] == QUERY
        assert PRINCIPAL not in _attribute_text(exporter.get_finished_spans())
