"""catalog.warm: the relations it reads are those the details fetch reads, pg_prewarm reads
all of them within the budget, stops at the deadline, and a catalog without the extension
falls back to a plain read."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

from catalog.bulk import BulkChunk, BulkDocument, bulk_load
from catalog.serving import DETAILS_SQL, chunk_details
from catalog.warm import (
    has_pg_prewarm,
    prewarm_serving_reads,
    serving_relations,
    stale_serving_tables,
)

pytestmark = pytest.mark.integration

N_DOCS = 40
CHUNKS_PER_DOC = 5


def _load(conn: psycopg.Connection) -> None:
    vec = np.ones(4, dtype="<f4").tobytes()
    docs = [
        BulkDocument(d, f"doc-{d}", f"Doc {d}", f"h{d}", CHUNKS_PER_DOC, metadata={"n": d}, public=d % 2 == 0)
        for d in range(1, N_DOCS + 1)
    ]
    # Every tenth chunk incompressible and long: stored out of line, in the TOAST table.
    chunks = [
        BulkChunk(
            row,
            f"c{row}",
            (row - 1) // CHUNKS_PER_DOC + 1,
            (row - 1) % CHUNKS_PER_DOC,
            secrets.token_hex(4000) if row % 10 == 0 else f"text of chunk {row}",
            0,
            4,
            vec,
        )
        for row in range(1, N_DOCS * CHUNKS_PER_DOC + 1)
    ]
    bulk_load(conn, tenant_id="t", documents=docs, chunks=chunks, model="m", dim=4)


@pytest.fixture
def loaded(conn: psycopg.Connection) -> psycopg.Connection:
    _load(conn)
    conn.execute("ANALYZE chunks, documents")
    return conn


def _plan_relations(plan: dict[str, Any]) -> Iterator[str]:
    for key in ("Relation Name", "Index Name"):
        if key in plan:
            yield plan[key]
    for child in plan.get("Plans", []):
        yield from _plan_relations(child)


@pytest.mark.parametrize("seqscan", ["on", "off"])
def test_the_details_fetch_reads_only_warmed_relations(loaded: psycopg.Connection, seqscan: str) -> None:
    """Off: the nested loop over primary keys that a large catalog gets; on: the tiny one's."""
    warmed = {r.name for r in serving_relations(loaded)}
    with loaded.transaction():
        loaded.execute(f"SET LOCAL enable_seqscan = {seqscan}")
        explain = loaded.execute(
            "EXPLAIN (FORMAT JSON) " + DETAILS_SQL, ([1, 10, 21, 150], "t", ["user:x"])
        ).fetchone()
    assert explain is not None
    plan = explain[0] if isinstance(explain[0], list) else json.loads(explain[0])
    read = set(_plan_relations(plan[0]["Plan"]))
    assert read and read <= warmed, f"the details fetch reads {read - warmed}, which warming skips"
    if seqscan == "off":
        assert {"chunks_pkey", "documents_pkey"} <= read
    assert chunk_details(loaded, rows=[1, 10, 21], tenant_id="t", readers=["user:x"])  # the query runs


def test_pg_prewarm_reads_every_serving_relation(loaded: psycopg.Connection) -> None:
    assert has_pg_prewarm(loaded)  # migration 006 created it
    relations = serving_relations(loaded)
    names = [r.name for r in relations]
    assert names[:4] == ["chunks_pkey", "documents_pkey", "chunks", "documents"]
    assert any(n.startswith("pg_toast.") for n in names)
    toast = loaded.execute(
        "SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'chunks'::regclass"
    ).fetchone()
    assert toast is not None and toast[0] > 0  # the long chunks really are out of line
    sizes = {
        r.name: loaded.execute("SELECT pg_relation_size(%s::regclass) / 8192", (r.name,)).fetchone()
        for r in relations
    }
    assert {r.name: (r.blocks,) for r in relations} == sizes
    result = prewarm_serving_reads(loaded, budget_s=30)
    assert result.method == "pg_prewarm" and result.complete
    assert result.blocks == result.total_blocks == sum(r.blocks for r in relations) > 0
    assert result.relations == sum(1 for r in relations if r.blocks)


def test_warming_stops_at_the_deadline(loaded: psycopg.Connection) -> None:
    result = prewarm_serving_reads(loaded, budget_s=0)
    assert not result.complete and result.blocks == 0 and result.total_blocks > 0


def test_without_the_extension_a_plain_read_warms(loaded: psycopg.Connection) -> None:
    loaded.execute("DROP EXTENSION pg_prewarm")
    try:
        assert not has_pg_prewarm(loaded)
        result = prewarm_serving_reads(loaded, budget_s=30)
        assert result.method == "read" and result.complete
        heaps = {r.name: r.blocks for r in serving_relations(loaded)}
        assert result.blocks == heaps["chunks"] + heaps["documents"] > 0
        assert not prewarm_serving_reads(loaded, budget_s=0).complete
    finally:
        loaded.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")


def _analyzed_at(conn: psycopg.Connection) -> dict[str, object]:
    rows = conn.execute(
        "SELECT relname, last_analyze FROM pg_stat_user_tables WHERE relname IN ('chunks', 'documents')"
    ).fetchall()
    return {str(name): at for name, at in rows}


def test_stale_statistics_after_a_bulk_load_are_renewed_before_warming(conn: psycopg.Connection) -> None:
    """200 chunks pass autovacuum's threshold (50 + 10% of none), 40 documents do not: only
    chunks is analyzed, once; a second warm-up finds nothing stale."""
    conn.execute("ANALYZE chunks, documents")  # whatever earlier tests left: a clean start
    _load(conn)
    conn.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, visible to itself
    conn.execute("SELECT 1")
    assert stale_serving_tables(conn) == ["chunks"]
    before = _analyzed_at(conn)
    result = prewarm_serving_reads(conn, budget_s=30)
    assert result.analyzed == ("chunks",) and result.complete
    after = _analyzed_at(conn)
    assert after["chunks"] != before["chunks"] and after["documents"] == before["documents"]
    assert stale_serving_tables(conn) == []
    assert prewarm_serving_reads(conn, budget_s=30).analyzed == ()


def test_no_time_left_analyzes_nothing(conn: psycopg.Connection) -> None:
    _load(conn)
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")
    assert "chunks" in stale_serving_tables(conn)
    assert prewarm_serving_reads(conn, budget_s=0).analyzed == ()
    assert "chunks" in stale_serving_tables(conn)  # left to autoanalyze


def test_tables_another_role_owns_are_left_to_autoanalyze(conn: psycopg.Connection) -> None:
    _load(conn)
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")
    assert "chunks" in stale_serving_tables(conn)
    conn.execute("DROP ROLE IF EXISTS ragline_warm_reader")
    conn.execute("CREATE ROLE ragline_warm_reader")
    try:
        with conn.transaction():
            conn.execute("SET LOCAL ROLE ragline_warm_reader")
            assert stale_serving_tables(conn) == []  # its ANALYZE would renew nothing
        assert "chunks" in stale_serving_tables(conn)
    finally:
        conn.execute("DROP ROLE ragline_warm_reader")
