"""A trace crosses into the shard servers over Ray: each server continues the caller's W3C
context in a ``shard.search`` span, its dense and lexical stages under it, exported over
OTLP/HTTP from the actor's own process (to a sink in this test), and no query text in any
attribute."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import TracerProvider

from authz.acl import AclFilter
from catalog import changes as changes_repo
from core.settings import Settings
from jobs.shard_servers import ShardFanout, ShardQuery, start_shard_servers
from tests.integration.jobs.test_shard_servers import N_SERVERS, corpus  # noqa: F401 (the fixture)
from wiring.search import shard_server_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUERY = "signing vault payroll"


class _Sink(BaseHTTPRequestHandler):
    spans: list[Span] = []

    def do_POST(self) -> None:  # noqa: N802 (the http.server hook's name)
        body = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                type(self).spans.extend(ss.spans)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


@pytest.fixture
def sink() -> Iterator[str]:
    _Sink.spans = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_shard_servers_continue_the_callers_trace(
    corpus: dict[str, str],  # noqa: F811
    db_url: str,
    ray_local: None,
    embedder,
    sink: str,
) -> None:
    import ray

    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(TracerProvider())
    settings = Settings(tracing={"enabled": True})
    config = dataclasses.replace(
        shard_server_config(settings, db_url, dim=embedder.dim),
        trace_env=(("OTEL_EXPORTER_OTLP_ENDPOINT", sink), ("OTEL_BSP_SCHEDULE_DELAY", "100")),
    )
    assert config.tracing
    servers = start_shard_servers(config, n_servers=N_SERVERS)
    fanout = ShardFanout(servers, timeout_s=30.0)
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            position = changes_repo.current_position(conn)
        vec = np.ones(embedder.dim, dtype=np.float32) / np.sqrt(embedder.dim)
        query = ShardQuery(AclFilter("t1", frozenset({"user:ann"})), position, vec, QUERY, 10)
        untraced = fanout.search(query)  # no span here: the servers record none either
        with trace.get_tracer("test").start_as_current_span("caller") as caller:
            got = fanout.search(query)
        assert got.degraded == [] and (got.dense or got.lexical)
        assert [h.chunk_id for h in got.dense] == [h.chunk_id for h in untraced.dense]
        ctx = caller.get_span_context()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            shard_spans = [s for s in _Sink.spans if s.name == "shard.search"]
            if len(shard_spans) >= N_SERVERS:
                break
            time.sleep(0.2)
        assert len(shard_spans) == N_SERVERS, [s.name for s in _Sink.spans]
        for s in shard_spans:
            assert s.trace_id == ctx.trace_id.to_bytes(16, "big")
            assert s.parent_span_id == ctx.span_id.to_bytes(8, "big")
        time.sleep(0.5)  # the stage spans end before their parent: already exported with it
        ids = {s.span_id for s in shard_spans}
        stages = [s for s in _Sink.spans if s.name.startswith("retrieve.")]
        assert {s.name for s in stages} >= {"retrieve.dense", "retrieve.lexical"}
        assert all(s.parent_span_id in ids for s in stages)
        assert {s.trace_id for s in _Sink.spans} == {ctx.trace_id.to_bytes(16, "big")}  # untraced: none
        text = str([list(s.attributes) for s in _Sink.spans]).lower()
        for word in QUERY.split():
            assert word not in text
        assert "user:ann" not in text
    finally:
        for s in servers:
            ray.kill(s)
