"""A migration with new chunk settings re-chunks from the parsed text stored at ingest,
including documents pushed through the API (whose payload is gone once ingested)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.services import ingest_hook
from catalog import indexes
from catalog import jobs as jobs_repo
from core.settings import Settings
from jobs.reembed_job import run_reembed
from services.migration import start_reembed
from tests.integration.api.conftest import make_key, wait_job
from tests.integration.jobs import reembed_helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE = "bundled:all-MiniLM-L6-v2"


@pytest.fixture
def client(db_url: str, tmp_path: Path, embedder) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path, database_url=db_url, index={"maintenance_seconds": 0})
    with TestClient(create_app(settings, hooks=[partial(ingest_hook, embedder=embedder)])) as c:
        import dataclasses

        c.app.state.runner.config = dataclasses.replace(c.app.state.runner.config, use_ray=False)  # type: ignore[attr-defined]
        yield c


def _doc(i: int) -> str:
    return f"# Topic {i}\n\n" + "\n\n".join(
        f"Paragraph {p} of document {i} talks about {h.TOPICS[(i + p) % len(h.TOPICS)][1]}" for p in range(5)
    )


def test_rechunk_from_stored_parsed_text(
    client: TestClient, db_url: str, tmp_path: Path, model_variants_dir: dict[str, Path]
) -> None:
    key = make_key(db_url, "acme", ["admin"], principal="service:ops")
    docs = [
        {"external_id": f"m{i}", "text": _doc(i), "mime_type": "text/markdown", "acl": {"public": True}}
        for i in range(4)
    ]
    job = client.post("/v1/documents", json={"documents": docs}, headers={"Authorization": f"Bearer {key}"})
    assert wait_job(client, key, job.json()["job_id"])["state"] == "succeeded"
    h.build_live(db_url, tmp_path / "indexes")
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM job_items WHERE payload IS NOT NULL").fetchone() == (0,)
        stored = conn.execute("SELECT count(*) FROM document_texts").fetchone()
        assert stored == (4,)
        # m3 stands for a document ingested before parsed text was stored: parents only.
        conn.execute(
            "DELETE FROM document_texts t USING documents d"
            " WHERE d.doc_id = t.doc_id AND d.external_id = 'm3'"
        )
        conn.execute(
            "UPDATE document_versions v SET chunking = NULL FROM documents d"
            " WHERE d.doc_id = v.doc_id AND d.external_id = 'm3'"
        )
    settings = Settings(data_dir=tmp_path, database_url=db_url)
    model = model_variants_dir["proj256"]
    config = h.migration_config(settings, db_url, model, chunking="32/4")
    job_id = start_reembed(db_url, config)
    assert run_reembed(db_url, job_id, config) == "succeeded"
    with psycopg.connect(db_url) as conn:
        report = jobs_repo.get_job(conn, job_id=job_id).params["report"]  # type: ignore[union-attr]
        assert report["rechunk"]["from_parsed_text"] == 3
        assert report["rechunk"]["from_parent_sections"] == 1
        assert report["rechunk"]["not_rechunkable"] == []
        rows = conn.execute(
            "SELECT v.chunking, max(c.token_count), count(*) FROM documents d"
            " JOIN document_versions v ON v.doc_id = d.doc_id AND v.version = d.current_version"
            " JOIN chunks c ON c.doc_id = d.doc_id AND c.version = d.current_version AND c.level = 0"
            " GROUP BY v.chunking"
        ).fetchall()
        assert len(rows) == 1 and rows[0][0] == "32/4" and rows[0][1] <= 32
        live_leaves = rows[0][2]
        per_model: dict[str, int] = dict(
            conn.execute(
                "SELECT e.model, count(*) FROM chunk_embeddings e JOIN chunks c ON c.chunk_row = e.chunk_row"
                " JOIN documents d ON d.doc_id = c.doc_id AND d.current_version = c.version GROUP BY e.model"
            ).fetchall()
        )
        # The live model got the new chunks too, so the old version kept answering from its delta.
        assert per_model == {str(model): live_leaves, BASE: live_leaves}
        live = indexes.resolve_alias(conn, alias="live")
        assert live is not None and live.embedding_model == str(model) and live.dim == 256
        assert live.chunk_count == live_leaves
