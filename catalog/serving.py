"""Reads the serving nodes make: document attributes, chunk positions, fresh chunks, details."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import kwargs_row

from catalog.documents import DocumentRow, documents_by_id


@dataclass(frozen=True, slots=True)
class ChunkPositions:
    """For index rows: the owning document and the version each chunk belongs to."""

    rows: np.ndarray
    doc_ids: np.ndarray
    versions: np.ndarray


def chunk_positions(conn: psycopg.Connection, *, rows: np.ndarray) -> ChunkPositions:
    """Doc id and version of each chunk row, aligned with ``rows`` (missing rows get -1)."""
    if len(rows) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return ChunkPositions(empty, empty, empty.astype(np.int32))
    found = conn.execute(
        "SELECT chunk_row, doc_id, version FROM chunks WHERE chunk_row = ANY(%s)", (rows.tolist(),)
    ).fetchall()
    lookup = {r[0]: (r[1], r[2]) for r in found}
    doc_ids = np.fromiter((lookup.get(int(r), (-1, -1))[0] for r in rows), dtype=np.int64, count=len(rows))
    versions = np.fromiter((lookup.get(int(r), (-1, -1))[1] for r in rows), dtype=np.int32, count=len(rows))
    return ChunkPositions(rows, doc_ids, versions)


@dataclass(frozen=True, slots=True)
class FreshChunk:
    row: int
    doc_id: int
    version: int
    text: str
    section_path: tuple[str, ...]
    vector: np.ndarray | None


def _fresh(*, section_path: list[str], vector: bytes | None, **columns: Any) -> FreshChunk:
    vec = np.frombuffer(vector, dtype="<f4").copy() if vector is not None else None
    return FreshChunk(section_path=tuple(section_path), vector=vec, **columns)


_FRESH_ROW = kwargs_row(_fresh)


def live_leaf_chunks(conn: psycopg.Connection, *, doc_ids: Sequence[int], model: str) -> list[FreshChunk]:
    """Leaf chunks of the documents' current versions, with their vectors for ``model``."""
    if not doc_ids:
        return []
    with conn.cursor(row_factory=_FRESH_ROW) as cur:
        return cur.execute(
            "SELECT c.chunk_row AS row, c.doc_id, c.version, c.text, c.section_path, e.vector FROM chunks c"
            " JOIN documents d ON d.doc_id = c.doc_id AND d.current_version = c.version"
            " AND d.state = 'active'"
            " LEFT JOIN chunk_embeddings e ON e.chunk_row = c.chunk_row AND e.model = %s"
            " WHERE c.doc_id = ANY(%s) AND c.level = 0 ORDER BY c.chunk_row",
            (model, list(doc_ids)),
        ).fetchall()


def all_documents(conn: psycopg.Connection) -> list[DocumentRow]:
    return documents_by_id(conn, doc_ids=None)


@dataclass(frozen=True, slots=True)
class ChunkDetail:
    row: int
    chunk_id: str
    doc_id: int
    external_id: str
    title: str | None
    text: str
    char_start: int
    char_end: int
    page_start: int | None
    page_end: int | None
    section_path: tuple[str, ...]
    metadata: dict[str, Any]
    parent_text: str | None
    parent_char_start: int | None
    parent_char_end: int | None


def _detail(*, section_path: list[str], metadata: dict[str, Any] | None, **columns: Any) -> ChunkDetail:
    return ChunkDetail(section_path=tuple(section_path), metadata=dict(metadata or {}), **columns)


_DETAIL_ROW = kwargs_row(_detail)

_DETAILS_FROM = (
    "SELECT c.chunk_row AS row, c.chunk_id, c.doc_id, d.external_id, d.title, c.text, c.char_start,"
    " c.char_end, c.page_start, c.page_end, c.section_path, d.metadata, p.text AS parent_text,"
    " p.char_start AS parent_char_start, p.char_end AS parent_char_end"
    " FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
    " LEFT JOIN chunks p ON p.chunk_row = c.parent_row"
)
# Live (active document, current version) and readable (tenant, public or a reader in the ACL).
_READABLE = (
    " AND d.tenant_id = %s AND d.state = 'active'"
    " AND c.version = d.current_version AND (d.acl_public OR d.acl_principals && %s::text[])"
)
# Module-level so that tests can EXPLAIN it: catalog.warm must warm every relation it reads.
DETAILS_SQL = _DETAILS_FROM + " WHERE c.chunk_row = ANY(%s)" + _READABLE


def chunk_details(
    conn: psycopg.Connection, *, rows: Sequence[int], tenant_id: str, readers: Sequence[str]
) -> dict[int, ChunkDetail]:
    """Details of result chunks, re-checking visibility and ACL in SQL as a second guard.

    The search already excluded anything the caller may not read; this WHERE clause makes a
    bug there fail closed (the chunk is dropped) instead of leaking.
    """
    if not rows:
        return {}
    with conn.cursor(row_factory=_DETAIL_ROW) as cur:
        found = cur.execute(DETAILS_SQL, (list(rows), tenant_id, list(readers))).fetchall()
    return {d.row: d for d in found}


def explain_chunk_details(
    conn: psycopg.Connection, *, rows: Sequence[int], tenant_id: str, readers: Sequence[str]
) -> dict[str, Any]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of :func:`chunk_details`: its plan, as PostgreSQL's JSON.

    For the cold-start benchmark (``bench/cold.py``), which compares the buffer hits and reads
    of this fetch before and after ``catalog.warm``; it runs the fetch for real.
    """
    row = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + DETAILS_SQL, (list(rows), tenant_id, list(readers))
    ).fetchone()
    if row is None:
        raise RuntimeError("EXPLAIN returned no plan")
    plans = row[0] if isinstance(row[0], list) else json.loads(row[0])
    plan: dict[str, Any] = plans[0]
    return plan


def readable_chunk(
    conn: psycopg.Connection, *, chunk_id: str, tenant_id: str, readers: Sequence[str]
) -> ChunkDetail | None:
    """One live chunk by its id if the readers may read it; else None (absent and forbidden
    look alike, so the answer tells nothing about chunks the caller cannot read)."""
    with conn.cursor(row_factory=_DETAIL_ROW) as cur:
        sql = _DETAILS_FROM + " WHERE c.chunk_id = %s" + _READABLE
        return cur.execute(sql, (chunk_id, tenant_id, list(readers))).fetchone()


def readable_document_chunks(
    conn: psycopg.Connection, *, external_id: str, tenant_id: str, readers: Sequence[str], limit: int
) -> list[ChunkDetail]:
    """The leaf chunks of a document's current version in text order (at most ``limit``), if
    the readers may read it; else an empty list."""
    with conn.cursor(row_factory=_DETAIL_ROW) as cur:
        sql = _DETAILS_FROM + " WHERE d.external_id = %s AND c.level = 0" + _READABLE
        sql += " ORDER BY c.char_start, c.chunk_row LIMIT %s"
        return cur.execute(sql, (external_id, tenant_id, list(readers), limit)).fetchall()
