"""Bulk-loaded rows read back like ingested ones; a non-empty catalog is refused."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from catalog.bulk import BulkChunk, BulkDocument, bulk_load
from catalog.maintenance import embedding_stats, live_leaf_count
from catalog.serving import chunk_details
from core.errors import ConflictError

pytestmark = pytest.mark.integration


def _load(conn: psycopg.Connection) -> None:
    docs = [
        BulkDocument(1, "a", "A", "h1", 2, source="wiki", metadata={"team": "x"}, public=True),
        BulkDocument(2, "b", "B", "h2", 1, principals=["group:eng"]),
    ]
    vec = np.ones(4, dtype="<f4").tobytes()
    chunks = [
        BulkChunk(1, "c1", 1, 0, "alpha", 0, 1, vec),
        BulkChunk(2, "c2", 1, 1, "beta", 6, 1, vec),
        BulkChunk(3, "c3", 2, 0, "gamma", 0, 1, vec),
    ]
    bulk_load(conn, tenant_id="t", documents=docs, chunks=chunks, model="m", dim=4)


def test_bulk_rows_read_back(conn: psycopg.Connection) -> None:
    _load(conn)
    assert live_leaf_count(conn, tenant_id="t") == 3
    assert embedding_stats(conn, model="m").vectors == 3 and embedding_stats(conn, model="m").dim == 4
    public = chunk_details(conn, rows=[1, 2, 3], tenant_id="t", readers=["user:z"])
    assert sorted(public) == [1, 2]
    assert public[2].text == "beta" and public[2].char_end == 10 and public[2].metadata == {"team": "x"}
    assert sorted(chunk_details(conn, rows=[1, 2, 3], tenant_id="t", readers=["group:eng"])) == [1, 2, 3]
    nxt = conn.execute("SELECT nextval(pg_get_serial_sequence('chunks', 'chunk_row'))").fetchone()
    assert nxt == (4,)


def test_bulk_load_refuses_a_non_empty_catalog(conn: psycopg.Connection) -> None:
    _load(conn)
    with pytest.raises(ConflictError, match="empty catalog"):
        _load(conn)
