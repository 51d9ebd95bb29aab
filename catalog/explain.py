"""Catalog reads behind ``POST /v1/admin/explain``: where a document or chunk stands.

Only ids, versions, states and ACL entries come back, never chunk or document text.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import class_row


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """One chunk's place in the catalog: its document, version and tombstone (if any)."""

    chunk_row: int
    doc_id: int
    external_id: str
    version: int
    level: int
    tombstone: str | None


def chunk_ref(conn: psycopg.Connection, *, tenant_id: str, chunk_id: str) -> ChunkRef | None:
    """The chunk ``chunk_id`` of ``tenant_id`` (None when absent or another tenant's)."""
    with conn.cursor(row_factory=class_row(ChunkRef)) as cur:
        return cur.execute(
            "SELECT c.chunk_row, c.doc_id, d.external_id, c.version, c.level, t.reason AS tombstone"
            " FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
            " LEFT JOIN tombstones t ON t.chunk_row = c.chunk_row"
            " WHERE c.chunk_id = %s AND d.tenant_id = %s",
            (chunk_id, tenant_id),
        ).fetchone()


def leaf_rows(conn: psycopg.Connection, *, doc_id: int, version: int) -> list[int]:
    """The searchable (leaf) chunk rows of one document version."""
    rows = conn.execute(
        "SELECT chunk_row FROM chunks WHERE doc_id = %s AND version = %s AND level = 0 ORDER BY chunk_row",
        (doc_id, version),
    ).fetchall()
    return [int(r[0]) for r in rows]


def embedded_rows(conn: psycopg.Connection, *, rows: list[int], model: str) -> int:
    """How many of ``rows`` have a vector for ``model``."""
    row = conn.execute(
        "SELECT count(*) FROM chunk_embeddings WHERE chunk_row = ANY(%s) AND model = %s", (rows, model)
    ).fetchone()
    return int(row[0]) if row else 0
