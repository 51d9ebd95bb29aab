"""Metrics that move, an audit trail of what each answer used, the status report, and no
tenant/principal id, key or document text in /metrics or the logs."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.app import ServiceHook, create_app
from api.services import audit_hook, ingest_hook, search_hook
from catalog import changes, indexes
from cli.main import main
from core.settings import get_settings
from jobs.rebuild_job import rebuild
from tests import factories
from tests.integration.api.conftest import full_settings, make_key, wait_job

pytestmark = pytest.mark.integration

TENANT = "tenant-q7zx"
PRINCIPAL = "user:pz-secret-7"
SECRET_WORDS = "zebraquartz velvetmoon"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _scrape(client: TestClient) -> tuple[str, Samples]:
    resp = client.get("/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return resp.text, samples


def _total(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


@pytest.fixture
def observed_client(db_url: str, tmp_path: Path, embedder) -> Iterator[TestClient]:
    """The full API with the retrieve audit writer."""
    import dataclasses

    settings = full_settings(db_url, tmp_path)
    hooks: list[ServiceHook] = [
        audit_hook,
        partial(ingest_hook, embedder=embedder),
        partial(search_hook, embedder=embedder),
    ]
    with TestClient(create_app(settings, hooks=hooks)) as client:
        runner = client.app.state.runner  # type: ignore[attr-defined]
        runner.config = dataclasses.replace(runner.config, use_ray=False)
        yield client


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _wait_for(client: TestClient, name: str, above: float, timeout: float = 10.0) -> Samples:
    deadline = time.monotonic() + timeout
    while True:
        _, samples = _scrape(client)
        if _total(samples, name) > above or time.monotonic() > deadline:
            return samples
        time.sleep(0.05)


def test_metrics_move_audit_shows_answers_and_status(
    observed_client: TestClient,
    db_url: str,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    client = observed_client
    ingest = make_key(db_url, TENANT, ["ingest"])
    reader = make_key(db_url, TENANT, ["query"], principal=PRINCIPAL)
    admin = make_key(db_url, TENANT, ["admin", "operator"])
    _, before = _scrape(client)

    def search(q: str, **extra: object) -> dict:
        r = client.post("/v1/retrieve", json={"query": q, **extra}, headers=_auth(reader))
        assert r.status_code == 200, r.text
        return r.json()

    search("anything at all")  # the freshness probe's baseline
    docs = [
        {"external_id": f"doc{i}", "text": f"{SECRET_WORDS} {topic}. " * 4, "acl": {"public": True}}
        for i, topic in enumerate(["tomato soup", "signing keys", "river boats", "green tea"])
    ]
    broken = {
        "external_id": "broken",
        "content_base64": base64.b64encode(b"%PDF-1.4 not really").decode(),
        "mime_type": "application/pdf",
    }
    resp = client.post("/v1/documents", json={"documents": [*docs, broken]}, headers=_auth(ingest))
    job = wait_job(client, ingest, resp.json()["job_id"])
    assert job["state"] == "partially_failed", job
    version = rebuild(
        db_url,
        factories.rebuild(index_root=tmp_path / "indexes", n_shards=2, flat_max_vectors=1_000),
    )
    with psycopg.connect(db_url) as conn:
        with conn.transaction():
            indexes.swap_alias(conn, alias="live", version_id=version)
        assert client.app.state.search.watcher.check_alias(conn) == version  # type: ignore[attr-defined]

    answer = search("tomato soup", rerank=True)
    assert answer["index_version"] == version and answer["results"]
    assert any(d["stage"] == "rerank" for d in answer["degraded"])
    after_push = _wait_for(client, "ragline_push_to_searchable_seconds_count", 0)
    assert client.delete("/v1/documents/doc1", headers=_auth(ingest)).status_code == 200
    search("signing keys")
    assert client.get("/v1/jobs", headers=_auth("rl_bogus_token")).status_code == 401
    _wait_for(client, "ragline_delete_to_invisible_seconds_count", 0)

    moved = {
        ("ragline_http_request_duration_seconds_count", ("route", "/v1/retrieve")),
        ("ragline_retrieve_stage_duration_seconds_count", ("stage", "fetch")),
        ("ragline_retrieve_stage_duration_seconds_count", ("stage", "embed")),
        ("ragline_errors_total", ("code", "unauthenticated")),
        ("ragline_retrieve_degraded_total", ("reason", "not_configured")),
        ("ragline_batch_size_count", ("batcher", "embed")),
        ("ragline_ingest_documents_total", ("outcome", "succeeded")),
        ("ragline_ingest_documents_total", ("outcome", "failed")),
        ("ragline_ingest_chunks_total", None),
        ("ragline_ingest_failures_total", None),
        ("ragline_jobs_finished_total", ("state", "partially_failed")),
        ("ragline_audit_events_written_total", None),
    }
    client.app.state.observer.audit.flush()  # type: ignore[attr-defined]
    text, after = _scrape(client)
    for name, label in moved:
        labels = dict([label]) if label else {}
        assert _total(after, name, **labels) > _total(before, name, **labels), (name, label)
    assert _total(after_push, "ragline_push_to_searchable_seconds_count") >= 1
    assert _total(after, "ragline_delete_to_invisible_seconds_count") >= 1
    # State gauges, read at scrape time
    assert _total(after, "ragline_index_version_info", alias="live", version=version) == 1
    assert _total(after, "ragline_shard_vectors") > 0
    assert _total(after, "ragline_shard_hidden_fraction") > 0  # doc1 was deleted after the build
    assert ("ragline_delta_chunks", ()) in after
    assert ("ragline_catalog_lag_positions", ()) in after
    assert ("ragline_batch_queue_depth", (("batcher", "embed"),)) in after
    assert _total(after, "ragline_jobs", kind="ingest", state="partially_failed") == 1

    # The lag gauge: with the watcher stopped, a committed change waits for the next request
    client.app.state.search.watcher.close()  # type: ignore[attr-defined]
    with psycopg.connect(db_url) as conn, conn.transaction():
        changes.record_change(conn, tenant_id=TENANT, kind="groups")
    assert _total(_scrape(client)[1], "ragline_catalog_lag_positions") == 1
    search("green tea")  # catches the view up before searching
    assert _total(_scrape(client)[1], "ragline_catalog_lag_positions") == 0

    # Nothing that identifies a tenant, principal or key, and no document text
    logs = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (TENANT, PRINCIPAL, ingest, reader, admin, "zebraquartz", "velvetmoon", "tomato soup"):
        assert secret not in text, secret
        assert secret not in logs, secret

    # The audit trail names the chunks and version behind the answer
    capsys.readouterr()
    assert main(["audit", "--action", "retrieve", "--principal", PRINCIPAL, "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    entry = next(e for e in entries if e["target"] == answer["request_id"])
    assert entry["details"]["chunk_ids"] == [r["chunk_id"] for r in answer["results"]]
    assert entry["details"]["index_version"] == version and entry["tenant_id"] == TENANT
    assert "query" not in entry["details"]  # query text is stored only when configured
    assert main(["audit", "--since", "10m"]) == 0
    table = capsys.readouterr().out
    for action in ("retrieve", "ingest.push", "document.delete"):
        assert action in table

    # Status, from the API (with this node's view) and the CLI
    assert client.get("/v1/admin/status", headers=_auth(reader)).status_code == 403
    status = client.get("/v1/admin/status", headers=_auth(admin)).json()
    assert status["live_version"] == version and len(status["shards"]) == 2
    assert sum(s["hidden"] for s in status["shards"]) >= 1
    assert status["node"]["serving_version"] == version and status["node"]["lag_positions"] == 0
    assert status["last_rebuild"]["version_id"] == version and status["last_migration"]["number"] >= 3
    assert status["capacity"]["vectors"] == sum(s["vectors"] for s in status["shards"])
    assert main(["status", "--json"]) == 0
    cli_status = json.loads(capsys.readouterr().out)
    assert cli_status["live_version"] == version and cli_status["shards"] == status["shards"]
    assert main(["status"]) == 0
    assert version in capsys.readouterr().out


def test_rate_and_burst_limits_answer_429_with_retry_after(db_url: str, tmp_path: Path) -> None:
    settings = full_settings(
        db_url, tmp_path, limits={"rate_per_key": 2.0, "burst_per_key": 2, "concurrency_per_key": 4}
    )
    with TestClient(create_app(settings, hooks=[])) as client:
        limited = make_key(db_url, "acme", ["ingest"])
        other = make_key(db_url, "acme", ["ingest"])
        codes = [client.get("/v1/jobs", headers=_auth(limited)).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        refused = client.get("/v1/jobs", headers=_auth(limited))
        assert refused.status_code == 429
        body = refused.json()["error"]
        assert body["code"] == "rate_limited" and body["request_id"] == refused.headers["x-request-id"]
        retry_after = int(refused.headers["retry-after"])
        assert retry_after == 1  # 2 requests per 1 s window
        assert client.get("/v1/jobs", headers=_auth(other)).status_code == 200
        time.sleep(retry_after + 0.05)
        assert client.get("/v1/jobs", headers=_auth(limited)).status_code == 200
        _, samples = _scrape(client)
        assert _total(samples, "ragline_rate_limited_total", limit="rate") >= 2
