"""``ragline serve`` with an OTLP endpoint configured: a retrieve's trace reaches the endpoint
from the server's span-export child process (the server span, ``retrieve``, each stage, the
embedder's batch and the statements, all one tree), nothing of the query or the principal
in any attribute, and the child ends with the server, even when the server is killed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from testkit.otlp import OtlpSink
from testkit.server import JOB_TIMEOUT_S, ServerProcess, auth, server_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUERY = "rotate vault signing ninety"
STAGES = {"acl_filter", "embed", "lexical", "dense", "fusion", "fetch", "packing"}


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    with OtlpSink() as endpoint:
        yield endpoint


@pytest.fixture
def traced_server(
    db_url: str, tmp_path: Path, sink: OtlpSink, embedding_export: Path
) -> Iterator[ServerProcess]:
    env = server_env(
        db_url,
        tmp_path / "data",
        models=embedding_export,
        OTEL_EXPORTER_OTLP_ENDPOINT=sink.url,
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    srv = ServerProcess(env, tmp_path / "server.log")
    try:
        srv.start()
        yield srv
    finally:
        srv.kill()


def _exporter_children(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children(recursive=True) if "core.span_export" in p.cmdline()]


def test_a_retrieve_trace_leaves_through_the_export_process(
    traced_server: ServerProcess, sink: OtlpSink
) -> None:
    srv = traced_server
    assert srv.proc is not None
    children = _exporter_children(srv.proc.pid)
    assert len(children) == 1, "no span-export child process"
    ingest = srv.key("acme", "ingest")
    alice = srv.key("acme", "query", principal="user:alice-otel")
    client = httpx.Client(base_url=srv.base_url, timeout=60.0)
    docs = [
        {"external_id": "keys", "text": "Rotate the signing keys in the vault every ninety days.",
         "acl": {"principals": ["user:alice-otel"]}},
        {"external_id": "lunch", "text": "Monday soup, Tuesday pasta, Wednesday fish.",
         "acl": {"principals": ["user:alice-otel"]}},
    ]  # fmt: skip
    r = client.post("/v1/documents", json={"documents": docs}, headers=auth(ingest))
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while client.get(f"/v1/jobs/{job_id}", headers=auth(ingest)).json()["state"] in ("queued", "running"):
        assert time.monotonic() < deadline, "ingest job did not finish"
        time.sleep(0.25)
    r = client.post("/v1/retrieve", json={"query": QUERY, "top_k": 2, "mode": "hybrid"}, headers=auth(alice))
    assert r.status_code == 200, r.text
    assert r.json()["results"] and r.json()["results"][0]["document_external_id"] == "keys"

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        roots = [s for s in sink.spans if s.name == "POST /v1/retrieve"]
        if roots:  # the server span ends last: its children were queued before it
            break
        time.sleep(0.2)
    assert roots, sorted({s.name for s in sink.spans})
    trace = [s for s in sink.spans if s.trace_id == roots[0].trace_id]
    by_id = {s.span_id: s for s in trace}
    (root,) = [s for s in trace if not s.parent_span_id]
    assert root.name == "POST /v1/retrieve" and root.kind == Span.SpanKind.SPAN_KIND_SERVER
    (retrieve,) = [s for s in trace if s.name == "retrieve"]
    assert retrieve.parent_span_id == root.span_id
    stages = {s.name.removeprefix("retrieve."): s for s in trace if s.name.startswith("retrieve.")}
    assert set(stages) >= STAGES
    assert all(s.parent_span_id == retrieve.span_id for s in stages.values())
    slack = 1_000_000  # a stage's start is placed from perf_counter: 1 ms of clock slack
    for s in stages.values():
        assert retrieve.start_time_unix_nano <= s.start_time_unix_nano + slack
        assert s.start_time_unix_nano <= s.end_time_unix_nano <= retrieve.end_time_unix_nano + slack
    statements = [s for s in trace if s.kind == Span.SpanKind.SPAN_KIND_CLIENT]
    assert statements, "no PostgreSQL statement spans"
    batches = [s for s in trace if s.name.endswith(".batch")]
    assert batches, "no embedder batch span"
    assert all(s.parent_span_id in by_id for s in trace if s is not root)  # one tree
    text = str([(s.name, list(s.attributes)) for s in trace]).lower()
    for word in QUERY.split():
        assert word not in text
    assert "alice-otel" not in text

    srv.kill()  # SIGKILL: no shutdown hook; the child sees its pipe close and exits
    gone, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, "the span-export child outlived a killed server"
