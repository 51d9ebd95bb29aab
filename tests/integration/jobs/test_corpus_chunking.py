"""Chunking is a property of the corpus (issue 44): after a re-chunking migration new ingests
cut with the live version's chunking, and a rollback serves the chunks the rolled-back-to
version holds, not the new chunking from its delta. No Ray: the migration embeds in-process."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from catalog import audit
from catalog import indexes as indexes_repo
from core.records import Acl
from core.settings import Settings
from jobs.reembed_job import run_reembed
from retrieve.service import RetrieveRequest
from services import index as index_ops
from services.caller import Caller
from services.migration import start_reembed
from tests.integration.jobs import reembed_helpers as h
from wiring import build_search_service

pytestmark = pytest.mark.integration

MODEL = "bundled:all-MiniLM-L6-v2"
TENANT = "acme"
DEFAULT, SMALL = "256/32", "32/4"  # the settings' chunking, the migration's


def _doc(i: int) -> str:
    return "\n\n".join(
        f"Paragraph {p} of document {i} explains {h.TOPICS[(i + p) % len(h.TOPICS)][1]}" for p in range(4)
    )


def _migrated(db_url: str, tmp_path: Path, embedder) -> tuple[str, str]:
    """Four documents cut at the settings' chunking, a first live version, then a migration
    to the same model re-chunked at 32/4 (forced: the gate is not under test); returns
    (first version, migrated version)."""
    h.ingest(db_url, tmp_path, embedder, TENANT, [(f"m{i}", _doc(i), Acl((), True)) for i in range(4)])
    first = h.build_live(db_url, tmp_path / "indexes")
    # PyTorch: an ONNX export of the model per test would cost more than the rest of it.
    settings = Settings(data_dir=tmp_path, database_url=db_url, embedding_backend="torch")
    config = h.migration_config(settings, db_url, Path(MODEL), chunking=SMALL, force=True)
    job_id = start_reembed(db_url, config)
    assert run_reembed(db_url, job_id, config) == "succeeded"
    with psycopg.connect(db_url) as conn:
        live = indexes_repo.resolve_alias(conn, alias="live")
    assert live is not None and live.version_id != first
    return first, live.version_id


def _current(conn: psycopg.Connection) -> dict[str, tuple[str, int]]:
    """Each live document's current version's chunking and its largest leaf in tokens."""
    rows = conn.execute(
        "SELECT d.external_id, v.chunking, max(c.token_count) FROM documents d"
        " JOIN document_versions v ON v.doc_id = d.doc_id AND v.version = d.current_version"
        " JOIN chunks c ON c.doc_id = d.doc_id AND c.version = d.current_version AND c.level = 0"
        " WHERE d.state = 'active' GROUP BY d.external_id, v.chunking"
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_an_ingest_after_a_rechunking_migration_cuts_with_the_live_versions_chunking(
    db_url: str, tmp_path: Path, embedder
) -> None:
    _, migrated = _migrated(db_url, tmp_path, embedder)
    # The runner's settings still say 256/32 (as `make run`'s sample ingest's do).
    h.ingest(db_url, tmp_path, embedder, TENANT, [("late", _doc(9), Acl((), True))])
    with psycopg.connect(db_url) as conn:
        current = _current(conn)
        version = indexes_repo.get_version(conn, version_id=migrated)
    assert current["late"][0] == SMALL and current["late"][1] <= 32
    assert {chunking for chunking, _ in current.values()} == {SMALL}  # one chunking, not two
    assert version is not None and version.chunking == SMALL  # what the ingest read


def test_a_rollback_serves_the_chunks_of_the_version_rolled_back_to(
    db_url: str, tmp_path: Path, embedder
) -> None:
    first, migrated = _migrated(db_url, tmp_path, embedder)
    h.ingest(db_url, tmp_path, embedder, TENANT, [("late", _doc(9), Acl((), True))])  # cut 32/4
    caller = Caller("user:test-operator", "cli")
    with psycopg.connect(db_url) as conn:
        assert index_ops.rollback(conn, alias="live", caller=caller) == (migrated, first)
        current = _current(conn)
        swap = audit.entries(conn, action="index.swap", limit=1)[0]
    assert {k: v[0] for k, v in current.items()} == {**{f"m{i}": DEFAULT for i in range(4)}, "late": SMALL}
    # The document written after the migration has no version cut 256/32: named, still served.
    assert swap.details["chunking"] == {
        "chunking": DEFAULT,
        "restored": 4,
        "kept": [f"{TENANT}/late"],
        "kept_total": 1,
    }

    settings = Settings(data_dir=tmp_path, database_url=db_url, embedding_backend="torch")
    acl = AclFilter(tenant_id=TENANT, readers=frozenset({"user:x"}))
    with ConnectionPool(db_url, min_size=1, max_size=2, open=True) as pool:
        service, close = build_search_service(settings, pool, embedder, watch=False)
        try:
            snap = service.state.current
            assert snap.version_id == first
            delta_docs = {int(d) for d in snap.delta.doc_ids}
            result = service.retrieve(
                RetrieveRequest(query=h.TOPICS[1][1], top_k=10, max_context_tokens=0), acl
            )
        finally:
            close()
    with psycopg.connect(db_url) as conn:
        late = conn.execute("SELECT doc_id FROM documents WHERE external_id = 'late'").fetchone()
        served = conn.execute(
            "SELECT d.external_id, v.chunking FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
            " JOIN document_versions v ON v.doc_id = c.doc_id AND v.version = c.version"
            " WHERE c.chunk_row = ANY(%s)",
            ([r.detail.row for r in result.results],),
        ).fetchall()
    # Only the document changed since comes from the delta; the others from the version's files.
    assert late is not None and delta_docs == {late[0]}
    assert served and all(chunking == (SMALL if ext == "late" else DEFAULT) for ext, chunking in served)

    with psycopg.connect(db_url) as conn:  # and forward again: the re-chunked versions come back
        assert index_ops.rollback(conn, alias="live", caller=caller) == (first, migrated)
        assert {v[0] for v in _current(conn).values()} == {SMALL}
