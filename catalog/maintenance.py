"""Reads that rebuilds, verification, capacity and schedulers make, and the locks they take.

The callers (``jobs/``, ``cli/``) own the transactions and the decisions; these functions only
say what the catalog holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg.rows import class_row

# The advisory lock key of scheduled maintenance: one replica per tick.
SCHEDULER_LOCK = 0x7267736368656475


@contextmanager
def repeatable_read(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """A REPEATABLE READ transaction: every read inside sees one snapshot of the catalog."""
    conn.commit()  # the snapshot must start its own transaction
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield conn


@contextmanager
def try_advisory_lock(conn: psycopg.Connection, key: int) -> Iterator[bool]:
    """Hold a session-level advisory lock for the block if it is free; yields whether it is held.

    ``conn`` must be in autocommit mode, so the lock outlives the statements in the block.
    """
    got = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    held = bool(got and got[0])
    try:
        yield held
    finally:
        if held:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


@dataclass(frozen=True, slots=True)
class LeafChunkRow:
    chunk_row: int
    doc_id: int
    tenant_id: str
    text: str
    section_path: list[str]
    vector: bytes


def iter_live_leaf_chunks(
    conn: psycopg.Connection, *, model: str, batch: int = 5000
) -> Iterator[LeafChunkRow]:
    """Every visible leaf chunk with its ``model`` vector, in row order, streamed.

    Run it inside :func:`repeatable_read` to read one consistent snapshot.
    """
    with conn.cursor(name="rebuild_snapshot", row_factory=class_row(LeafChunkRow)) as cur:
        cur.itersize = batch
        cur.execute(
            "SELECT c.chunk_row, c.doc_id, d.tenant_id, c.text, c.section_path, e.vector FROM chunks c"
            " JOIN documents d ON d.doc_id = c.doc_id AND d.current_version = c.version"
            " AND d.state = 'active'"
            " JOIN chunk_embeddings e ON e.chunk_row = c.chunk_row AND e.model = %s"
            " WHERE c.level = 0 ORDER BY c.chunk_row",
            (model,),
        )
        yield from cur


@dataclass(frozen=True, slots=True)
class EmbeddingStats:
    vectors: int
    dim: int | None


def embedding_stats(conn: psycopg.Connection, *, model: str) -> EmbeddingStats:
    """How many ``model`` vectors a full index would hold now, and their dimension: those of
    visible leaf chunks, as :func:`iter_live_leaf_chunks` reads them for a rebuild (a deleted
    or superseded chunk's vector stays stored until a purge, but no index version holds it)."""
    with conn.cursor(row_factory=class_row(EmbeddingStats)) as cur:
        row = cur.execute(
            "SELECT count(*) AS vectors, max(e.dim) AS dim FROM chunks c"
            " JOIN documents d ON d.doc_id = c.doc_id AND d.current_version = c.version"
            " AND d.state = 'active'"
            " JOIN chunk_embeddings e ON e.chunk_row = c.chunk_row AND e.model = %s"
            " WHERE c.level = 0",
            (model,),
        ).fetchone()
    return row or EmbeddingStats(0, None)


def hidden_count(conn: psycopg.Connection, *, rows: list[int]) -> int:
    """How many of these chunk rows are hidden now (document deleted, or chunk superseded)."""
    row = conn.execute(
        "SELECT count(*) FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
        " WHERE c.chunk_row = ANY(%s) AND (d.state <> 'active' OR d.current_version <> c.version)",
        (rows,),
    ).fetchone()
    return int(row[0]) if row else 0


def live_leaf_count(conn: psycopg.Connection, *, tenant_id: str) -> int:
    """A tenant's visible leaf chunks (what a full index of it holds)."""
    row = conn.execute(
        "SELECT count(*) FROM chunks c JOIN documents d USING (doc_id)"
        " WHERE d.tenant_id = %s AND c.level = 0 AND c.version = d.current_version AND d.state = 'active'",
        (tenant_id,),
    ).fetchone()
    return int(row[0]) if row else 0


def fresh_leaf_count(conn: psycopg.Connection, *, after_position: int, tenant_id: str | None = None) -> int:
    """Visible leaf chunks of documents versioned after ``after_position`` (a version's delta);
    with ``tenant_id``, that tenant's only."""
    row = conn.execute(
        "SELECT count(*) FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
        " AND d.current_version = c.version AND d.state = 'active' WHERE c.level = 0 AND c.doc_id IN"
        " (SELECT doc_id FROM catalog_changes WHERE seq > %s AND kind = 'version')"
        " AND (%s::text IS NULL OR d.tenant_id = %s)",
        (after_position, tenant_id, tenant_id),
    ).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True, slots=True)
class IndexedRowCounts:
    """Index rows against the catalog."""

    unknown: int  # in the index, absent from the catalog
    hidden: int  # deleted or superseded since the build
    live: int


@dataclass(frozen=True, slots=True)
class OutsideRowCounts:
    """Visible leaf chunks the index does not hold."""

    missing: int  # visible before the build position: never expected
    fresh: int  # written after the build: served from the delta


def indexed_row_counts(conn: psycopg.Connection, *, rows: list[int]) -> IndexedRowCounts:
    with conn.cursor(row_factory=class_row(IndexedRowCounts)) as cur:
        row = cur.execute(
            "WITH idx AS (SELECT unnest(%s::bigint[]) AS r)"
            " SELECT count(*) FILTER (WHERE c.chunk_row IS NULL) AS unknown,"
            " count(*) FILTER (WHERE c.chunk_row IS NOT NULL"
            "   AND (d.state <> 'active' OR d.current_version <> c.version)) AS hidden,"
            " count(*) FILTER (WHERE d.state = 'active' AND d.current_version = c.version) AS live"
            " FROM idx LEFT JOIN chunks c ON c.chunk_row = idx.r"
            " LEFT JOIN documents d ON d.doc_id = c.doc_id",
            (rows,),
        ).fetchone()
    return row or IndexedRowCounts(0, 0, 0)


def outside_row_counts(conn: psycopg.Connection, *, rows: list[int], position: int) -> OutsideRowCounts:
    with conn.cursor(row_factory=class_row(OutsideRowCounts)) as cur:
        row = cur.execute(
            "SELECT count(*) FILTER (WHERE NOT changed) AS missing, count(*) FILTER (WHERE changed) AS fresh"
            " FROM (SELECT c.chunk_row, EXISTS (SELECT 1 FROM catalog_changes x WHERE x.doc_id = c.doc_id"
            "   AND x.kind = 'version' AND x.seq > %s) AS changed"
            " FROM chunks c JOIN documents d ON d.doc_id = c.doc_id AND d.current_version = c.version"
            " AND d.state = 'active' WHERE c.level = 0 AND NOT (c.chunk_row = ANY(%s))) s",
            (position, rows),
        ).fetchone()
    return row or OutsideRowCounts(0, 0)


def all_live_leaf_count(conn: psycopg.Connection) -> int:
    """Visible leaf chunks of every tenant (what a complete index version holds)."""
    row = conn.execute(
        "SELECT count(*) FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
        " AND d.current_version = c.version AND d.state = 'active' WHERE c.level = 0"
    ).fetchone()
    return int(row[0]) if row else 0


def live_leaf_texts(conn: psycopg.Connection) -> list[tuple[str, list[str]]]:
    """``(text, section_path)`` of every visible leaf chunk of every tenant, in row order."""
    rows = conn.execute(
        "SELECT c.text, c.section_path FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
        " AND d.current_version = c.version AND d.state = 'active' WHERE c.level = 0 ORDER BY c.chunk_row"
    ).fetchall()
    return [(r[0], list(r[1])) for r in rows]


def max_chunk_row(conn: psycopg.Connection) -> int:
    """The highest chunk row ever written (rows are never reused), 0 for an empty catalog."""
    row = conn.execute("SELECT max(chunk_row) FROM chunks").fetchone()
    return int(row[0]) if row and row[0] else 0
