"""The searches pseudo-relevance feedback runs (``HybridSearcher.lexical_terms``,
``HybridSearcher.vectors_of`` then ``dense``) through a real catalog, index version and
``SearchService``: they take the request's ACL masks, so a weighted query or a moved vector
never reaches a chunk the caller may not read or one deleted, even when the expansion terms
come from such a chunk's text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from catalog import documents as docs_repo
from catalog import indexes
from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from catalog.principals import ensure_tenant
from core.records import Acl
from core.settings import Settings
from jobs.rebuild_job import rebuild
from jobs.runner import IngestRunner
from retrieve.feedback import rocchio
from retrieve.hybrid import StageLog, build_masks
from retrieve.service import SearchService
from tests import factories
from wiring import build_search_service

pytestmark = [pytest.mark.integration]

TENANT = "tf"
DOCS = {  # external id -> (text, acl)
    "pub-pump": ("pump pressure valve maintenance schedule", Acl((), True)),
    "pub-fan": ("cooling fan belt tension in the north hall", Acl((), True)),
    "ann-pump": ("pump gearbox bearing vibration secret report", Acl(("user:ann",), False)),
    "gone-pump": ("pump gearbox bearing vibration deleted memo", Acl((), True)),
    "other-tenant": ("pump gearbox bearing vibration", Acl((), True)),
}


@pytest.fixture
def world(db_url: str, tmp_path: Path, embedder) -> Iterator[tuple[SearchService, dict[str, int]]]:
    settings = Settings(data_dir=tmp_path, database_url=db_url)
    runner = IngestRunner(
        factories.runner(
            conninfo=db_url, model_name=settings.embedding_model, data_dir=tmp_path, use_ray=False
        ),
        lambda: embedder,
    )
    with psycopg.connect(db_url) as conn:
        for tenant in (TENANT, "tg"):
            ensure_tenant(conn, tenant_id=tenant)
    for tenant in (TENANT, "tg"):
        items = [
            NewItem(external_id=d, mime_type="text/plain", payload=text.encode(), acl=acl)
            for d, (text, acl) in DOCS.items()
            if (d == "other-tenant") == (tenant == "tg")
        ]
        with psycopg.connect(db_url) as conn:
            job = jobs_repo.create_job(conn, tenant_id=tenant, kind="ingest", items=items)
        assert runner.run_job(job) == "succeeded"
    config = factories.rebuild(index_root=tmp_path / "indexes", model_name=settings.embedding_model)
    version = rebuild(db_url, config)
    with psycopg.connect(db_url) as conn:
        with conn.transaction():
            indexes.swap_alias(conn, alias="live", version_id=version)
        rows: dict[str, int] = dict(
            conn.execute(
                "SELECT d.external_id, c.chunk_row FROM chunks c JOIN documents d USING (doc_id)"
                " WHERE d.tenant_id = %s",
                (TENANT,),
            ).fetchall()
        )
        docs_repo.delete_document(conn, tenant_id=TENANT, external_id="gone-pump")  # after the build
    pool = ConnectionPool(db_url, min_size=1, max_size=2, open=True)
    service, close = build_search_service(settings, pool, embedder, watch=False)
    try:
        yield service, rows
    finally:
        close()
        pool.close()


def test_weighted_lexical_and_moved_vector_keep_to_the_masks(world) -> None:
    service, rows = world
    service.fusion_for(TENANT)  # caught up: the delete is applied to the view
    snap = service.state.current
    bob = AclFilter(tenant_id=TENANT, readers=frozenset({"user:bob"}))
    masks = build_masks(service.state, snap, bob)
    log = StageLog()
    # Terms only the unreadable, the deleted and the other tenant's documents hold.
    weights = {"gearbox": 1.0, "bear": 1.0, "vibrat": 1.0, "pump": 0.1}
    found = [h.chunk_id for h in service.searcher.lexical_terms(snap, masks, weights, 10, log)]
    assert found == [rows["pub-pump"]], found
    ann = AclFilter(tenant_id=TENANT, readers=frozenset({"user:ann"}))
    found_ann = service.searcher.lexical_terms(snap, build_masks(service.state, snap, ann), weights, 10, log)
    assert [h.chunk_id for h in found_ann][0] == rows["ann-pump"]  # the reader finds it first
    assert rows["gone-pump"] not in {h.chunk_id for h in found_ann}

    # Stored vectors are the indexed ones; a query moved onto the hidden document's vector
    # still returns only what bob may read.
    stored = service.searcher.vectors_of(snap, [rows["ann-pump"], rows["pub-pump"], -1])
    assert set(stored) == {rows["ann-pump"], rows["pub-pump"]}
    model = service.embedders.get(snap.model)
    again = model.submit(DOCS["pub-pump"][0]).result()
    assert float(np.dot(stored[rows["pub-pump"]], again)) > 0.99
    moved = rocchio(again, [stored[rows["ann-pump"]]], alpha=0.0, beta=1.0)
    dense = {h.chunk_id for h in service.searcher.dense(snap, masks, moved, 10, log)}
    assert dense == {rows["pub-pump"], rows["pub-fan"]}
    assert not log.degraded
