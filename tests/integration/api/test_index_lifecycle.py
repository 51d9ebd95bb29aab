from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from catalog import indexes
from jobs.index_verify import reconcile
from jobs.rebuild_job import rebuild, rebuild_advice
from tests import factories
from tests.integration.api.conftest import make_key, push_and_wait, swap_live

pytestmark = pytest.mark.integration

TOPICS = [
    "volcano eruption lava",
    "sourdough bread baking",
    "kubernetes pod scheduling",
    "tax return deadline",
    "marathon training plan",
    "orbital mechanics satellites",
]


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def test_rebuild_swap_tombstones_and_corrupt_version(
    full_client: TestClient, db_url: str, tmp_path: Path, embedder
) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:r")
    push_and_wait(
        full_client,
        ingest,
        [
            {"external_id": f"doc{i}", "text": f"All about {t}. " * 5, "acl": {"public": True}}
            for i, t in enumerate(TOPICS)
        ],
    )
    config = factories.rebuild(
        index_root=tmp_path / "indexes",
        model_name="bundled:all-MiniLM-L6-v2",
        n_shards=2,
        dense_overrides={"hnsw_m": 8, "ef_construction": 40},
        flat_max_vectors=2,
    )
    v1 = rebuild(db_url, config)
    assert swap_live(db_url, full_client, v1) == v1

    def search(q: str) -> tuple[list[str], str]:
        body = full_client.post("/v1/retrieve", json={"query": q, "top_k": 3}, headers=_auth(reader)).json()
        return [r["document_external_id"] for r in body["results"]], body["index_version"]

    hits, version = search("lava from a volcano")
    assert hits[0] == "doc0" and version == v1
    # a fresh write goes to the delta and is searchable at once
    push_and_wait(
        full_client,
        ingest,
        [{"external_id": "new", "text": "Quantum entanglement of photons. " * 4, "acl": {"public": True}}],
    )
    assert search("entangled photons quantum")[0][0] == "new"
    # tombstones: delete from the index and from the delta, a new version of an indexed document
    full_client.delete("/v1/documents/doc0", headers=_auth(ingest))
    full_client.delete("/v1/documents/new", headers=_auth(ingest))
    push_and_wait(
        full_client,
        ingest,
        [{"external_id": "doc1", "text": "Rye flour and a starter culture. " * 4, "acl": {"public": True}}],
    )
    assert "doc0" not in search("lava from a volcano")[0]
    assert "new" not in search("entangled photons quantum")[0]
    with psycopg.connect(db_url) as conn:
        report = reconcile(conn, indexes.resolve_alias(conn, alias="live"))  # type: ignore[arg-type]
        assert report.ok and report.hidden_rows >= 2 and report.fresh_after_build >= 1
        advice = rebuild_advice(
            conn, alias="live", tombstone_ratio=0.1, delta_chunks=1000, model="bundled:all-MiniLM-L6-v2"
        )
        assert advice.needed
    v2 = rebuild(db_url, config)
    assert swap_live(db_url, full_client, v2) == v2
    hits, version = search("lava from a volcano")
    assert version == v2 and "doc0" not in hits and "new" not in search("entangled photons quantum")[0]
    assert search("rye flour starter")[0][0] == "doc1"
    # a corrupt version is refused; v2 keeps serving
    v3 = rebuild(db_url, config)
    victim = next((tmp_path / "indexes" / v3).rglob("index.faiss"))
    victim.write_bytes(victim.read_bytes()[:-10])
    assert swap_live(db_url, full_client, v3) is None
    error = full_client.app.state.search.last_swap_error  # type: ignore[attr-defined]
    assert error and v3 in error
    assert search("rye flour starter")[1] == v2
