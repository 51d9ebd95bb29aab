"""A trace crosses into the shard servers over Ray: each server continues the caller's W3C
context in a ``shard.search`` span, its dense and lexical stages under it, exported over
OTLP/HTTP from the actor's own process (to a sink in this test), and no query text in any
attribute."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import numpy as np
import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from authz.acl import AclFilter
from catalog import changes as changes_repo
from core.settings import Settings
from jobs.shard_servers import ShardFanout, ShardQuery, start_shard_servers
from testkit.otlp import OtlpSink
from tests.integration.jobs.test_shard_servers import N_SERVERS, corpus  # noqa: F401 (the fixture)
from wiring.search import shard_server_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUERY = "signing vault payroll"


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    with OtlpSink() as endpoint:
        yield endpoint


def test_shard_servers_continue_the_callers_trace(
    corpus: dict[str, str],  # noqa: F811
    db_url: str,
    ray_local: None,
    embedder,
    sink: OtlpSink,
) -> None:
    import ray

    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(TracerProvider())
    settings = Settings(tracing={"enabled": True})
    config = dataclasses.replace(
        shard_server_config(settings, db_url, dim=embedder.dim),
        trace_env=(("OTEL_EXPORTER_OTLP_ENDPOINT", sink.url), ("OTEL_BSP_SCHEDULE_DELAY", "100")),
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
            shard_spans = [s for s in sink.spans if s.name == "shard.search"]
            if len(shard_spans) >= N_SERVERS:
                break
            time.sleep(0.2)
        assert len(shard_spans) == N_SERVERS, [s.name for s in sink.spans]
        for s in shard_spans:
            assert s.trace_id == ctx.trace_id.to_bytes(16, "big")
            assert s.parent_span_id == ctx.span_id.to_bytes(8, "big")
        time.sleep(0.5)  # the stage spans end before their parent: already exported with it
        ids = {s.span_id for s in shard_spans}
        stages = [s for s in sink.spans if s.name.startswith("retrieve.")]
        assert {s.name for s in stages} >= {"retrieve.dense", "retrieve.lexical"}
        assert all(s.parent_span_id in ids for s in stages)
        assert {s.trace_id for s in sink.spans} == {ctx.trace_id.to_bytes(16, "big")}  # untraced: none
        text = str([list(s.attributes) for s in sink.spans]).lower()
        for word in QUERY.split():
            assert word not in text
        assert "user:ann" not in text
    finally:
        for s in servers:
            ray.kill(s)
