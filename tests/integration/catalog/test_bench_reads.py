"""The catalog reads the benchmarks make (issue 25: their SQL moved into catalog/): the live
leaf texts, the highest chunk row, the succeeded items' times and the details fetch's plan."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from catalog import jobs as jobs_repo
from catalog.bulk import BulkChunk, BulkDocument, bulk_load
from catalog.jobs import NewItem
from catalog.maintenance import live_leaf_texts, max_chunk_row
from catalog.principals import ensure_tenant
from catalog.serving import explain_chunk_details
from core.records import Acl

pytestmark = pytest.mark.integration


def _load(conn: psycopg.Connection, n_docs: int = 3, per_doc: int = 2) -> None:
    vec = np.ones(4, dtype="<f4").tobytes()
    docs = [
        BulkDocument(d, f"doc-{d}", f"Doc {d}", f"h{d}", per_doc, public=True) for d in range(1, n_docs + 1)
    ]
    chunks = [
        BulkChunk(row, f"c{row}", (row - 1) // per_doc + 1, (row - 1) % per_doc, f"text {row}", 0, 2, vec)
        for row in range(1, n_docs * per_doc + 1)
    ]
    bulk_load(conn, tenant_id="t", documents=docs, chunks=chunks, model="m", dim=4)


def test_an_empty_catalog_has_no_rows_and_no_texts(conn: psycopg.Connection) -> None:
    assert max_chunk_row(conn) == 0
    assert live_leaf_texts(conn) == []


def test_leaf_texts_come_in_row_order_up_to_the_highest_row(conn: psycopg.Connection) -> None:
    _load(conn)
    texts = live_leaf_texts(conn)
    assert [t for t, _ in texts] == [f"text {r}" for r in range(1, 7)]
    assert all(isinstance(path, list) for _, path in texts)
    assert max_chunk_row(conn) == 6


def test_the_details_plan_is_explained_and_the_fetch_runs(conn: psycopg.Connection) -> None:
    _load(conn)
    plan = explain_chunk_details(conn, rows=[1, 4], tenant_id="t", readers=["user:x"])
    assert plan["Plan"]["Actual Rows"] == 2  # ANALYZE ran it: both public chunks came back
    assert "Shared Hit Blocks" in plan["Plan"] and plan["Execution Time"] >= 0


def test_succeeded_item_times_name_each_written_document(conn: psycopg.Connection) -> None:
    ensure_tenant(conn, tenant_id="t")
    items = [
        NewItem(
            external_id=e, mime_type="text/plain", title=None, payload=b"x", acl=Acl((), True), byte_size=1
        )
        for e in ("a", "b", "c")
    ]
    job = jobs_repo.create_job(conn, tenant_id="t", kind="ingest", items=items)
    jobs_repo.finish_item(conn, job_id=job, item_no=0, state="succeeded")
    jobs_repo.finish_item(conn, job_id=job, item_no=1, state="failed", error_code="parse_error")
    times = jobs_repo.succeeded_item_times(conn)
    assert set(times) == {"a"} and times["a"].tzinfo is not None
