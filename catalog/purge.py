"""Purging what deleted and superseded document versions left in the catalog: chunk text,
vectors, stored parsed text, and the payloads of jobs that will not run again.

A hidden version is already invisible to every search (visibility is decided by the
document row); purging removes its bytes. Rows of the version stay in ``document_versions``
(sizes and a content hash, no text) so version numbers are never reused: an index version
built before the purge may still name the old rows, and those must never match a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg


@dataclass(frozen=True, slots=True)
class PurgeCounts:
    versions: int = 0  # document versions whose chunks and parsed text were removed
    chunks: int = 0  # chunk rows removed (their vectors and tombstones with them)
    documents: int = 0  # deleted documents whose title, metadata and ACL were cleared
    job_payloads: int = 0  # job items whose payload, title and metadata were dropped

    def __add__(self, other: PurgeCounts) -> PurgeCounts:
        return PurgeCounts(
            self.versions + other.versions,
            self.chunks + other.chunks,
            self.documents + other.documents,
            self.job_payloads + other.job_payloads,
        )

    @property
    def any(self) -> bool:
        return bool(self.versions or self.chunks or self.documents or self.job_payloads)


# Hidden versions: every version of a deleted document, every non-current version of a live one.
_HIDDEN = (
    "SELECT DISTINCT c.doc_id, c.version FROM tombstones t JOIN chunks c ON c.chunk_row = t.chunk_row"
    " JOIN documents d ON d.doc_id = c.doc_id"
    " WHERE (d.state = 'deleted' OR d.current_version IS DISTINCT FROM c.version)"
)


def purge_hidden(conn: psycopg.Connection, *, older_than_seconds: float, limit: int = 1000) -> PurgeCounts:
    """Purge up to ``limit`` versions hidden for longer than ``older_than_seconds``."""
    rows = conn.execute(
        _HIDDEN + " AND t.created_at < now() - make_interval(secs => %s) LIMIT %s",
        (older_than_seconds, limit),
    ).fetchall()
    return _purge_versions(conn, [(int(d), int(v)) for d, v in rows])


def purge_document(conn: psycopg.Connection, *, doc_id: int) -> PurgeCounts:
    """Purge every hidden version of one (deleted) document now, whatever its age."""
    rows = conn.execute(_HIDDEN + " AND c.doc_id = %s", (doc_id,)).fetchall()
    counts = _purge_versions(conn, [(int(d), int(v)) for d, v in rows])
    # Finished items of any job that carried the document (their payload is already gone).
    items = conn.execute(
        "UPDATE job_items SET payload = NULL, title = NULL, metadata = '{}'::jsonb WHERE doc_id = %s"
        " AND (payload IS NOT NULL OR title IS NOT NULL OR metadata <> '{}'::jsonb)",
        (doc_id,),
    ).rowcount
    return counts + PurgeCounts(job_payloads=items)


def erase_document_rest(conn: psycopg.Connection, *, doc_id: int) -> int:
    """After :func:`purge_document`, for an erasure: what no tombstone leads to (a version
    with no chunks keeps its parsed text, which a re-chunk would read; warnings may quote an
    attachment's title; the description of a document whose versions had no chunks), gone
    too. ``doc_id`` is deleted. Returns the chunk rows this found (normally none)."""
    chunks = conn.execute("DELETE FROM chunks WHERE doc_id = %s", (doc_id,)).rowcount
    conn.execute("DELETE FROM document_texts WHERE doc_id = %s", (doc_id,))
    conn.execute(
        "UPDATE document_versions SET warnings = '{}' WHERE doc_id = %s AND cardinality(warnings) > 0",
        (doc_id,),
    )
    conn.execute(
        "UPDATE documents SET title = NULL, metadata = '{}'::jsonb, source = NULL, acl_principals = '{}',"
        " acl_public = false WHERE doc_id = %s AND state = 'deleted'",
        (doc_id,),
    )
    if chunks:
        _mark_purged(conn)
    return chunks


def _mark_purged(conn: psycopg.Connection) -> None:
    conn.execute(
        "INSERT INTO purge_state (last_purged_at) VALUES (now())"
        " ON CONFLICT (singleton) DO UPDATE SET last_purged_at = EXCLUDED.last_purged_at"
    )


def _purge_versions(conn: psycopg.Connection, versions: list[tuple[int, int]]) -> PurgeCounts:
    if not versions:
        return PurgeCounts()
    doc_ids = [d for d, _ in versions]
    numbers = [v for _, v in versions]
    pairs = "SELECT * FROM unnest(%s::bigint[], %s::integer[]) AS p(doc_id, version)"
    # Parents reference leaves' rows and vice versa within one version: one statement for both.
    chunks = conn.execute(
        f"DELETE FROM chunks WHERE (doc_id, version) IN ({pairs})", (doc_ids, numbers)
    ).rowcount
    conn.execute(f"DELETE FROM document_texts WHERE (doc_id, version) IN ({pairs})", (doc_ids, numbers))
    conn.execute(
        "UPDATE job_items SET title = NULL, metadata = '{}'::jsonb"
        f" WHERE (doc_id, version) IN ({pairs}) AND state <> 'pending'",
        (doc_ids, numbers),
    )
    documents = conn.execute(
        "UPDATE documents SET title = NULL, metadata = '{}'::jsonb, source = NULL, acl_principals = '{}',"
        " acl_public = false WHERE doc_id = ANY(%s) AND state = 'deleted'"
        " AND (title IS NOT NULL OR metadata <> '{}'::jsonb OR source IS NOT NULL OR acl_principals <> '{}')",
        (sorted(set(doc_ids)),),
    ).rowcount
    if chunks:
        _mark_purged(conn)
    return PurgeCounts(versions=len(versions), chunks=chunks, documents=documents)


def purged_since(conn: psycopg.Connection, *, version_id: str) -> bool:
    """Whether chunk text was purged after ``version_id`` started building (its files may
    hold it)."""
    row = conn.execute(
        "SELECT 1 FROM purge_state p JOIN index_versions v ON v.version_id = %s"
        " WHERE p.last_purged_at > v.created_at",
        (version_id,),
    ).fetchone()
    return row is not None


def drop_stale_payloads(conn: psycopg.Connection, *, older_than_seconds: float) -> int:
    """Drop the payloads of cancelled and failed jobs finished longer ago than
    ``older_than_seconds`` (their resume window): a resumed item then fails as empty."""
    return conn.execute(
        "UPDATE job_items i SET payload = NULL FROM jobs j WHERE j.job_id = i.job_id"
        " AND i.payload IS NOT NULL AND j.state IN ('cancelled', 'failed', 'partially_failed')"
        " AND j.finished_at < now() - make_interval(secs => %s)",
        (older_than_seconds,),
    ).rowcount


@dataclass(frozen=True, slots=True)
class ChunkRefs:
    """Every chunk of some documents (any version): the row ids index files hold and the
    chunk ids the audit log names."""

    rows: tuple[int, ...]
    ids: tuple[str, ...]


def chunk_refs(conn: psycopg.Connection, *, doc_ids: list[int]) -> ChunkRefs:
    """The chunks of ``doc_ids`` still in the catalog (read before a purge deletes them)."""
    rows = conn.execute(
        "SELECT chunk_row, chunk_id FROM chunks WHERE doc_id = ANY(%s) ORDER BY chunk_row", (doc_ids,)
    ).fetchall()
    return ChunkRefs(tuple(int(r[0]) for r in rows), tuple(str(r[1]) for r in rows))


# Every table a purge or an erasure takes text, vectors, payloads or query text out of (their
# TOAST tables go with them).
TEXT_TABLES = (
    "chunks",
    "chunk_embeddings",
    "tombstones",
    "document_texts",
    "document_versions",
    "documents",
    "job_items",
    "feedback",
    "audit_log",
)


@dataclass(frozen=True, slots=True)
class Compaction:
    statistics: bool  # the planner statistics were rewritten too (their samples quote rows)
    wal: bool  # the WAL written before the compaction was switched away from and removed


def compact(conn: psycopg.Connection) -> Compaction:
    """Rewrite the tables a purge touched (``VACUUM FULL``), so the purged rows' bytes leave
    the table and TOAST files too: a DELETE only marks them dead, and a plain VACUUM makes
    their space reusable without overwriting it. It takes an ACCESS EXCLUSIVE lock per table
    for the rewrite (reads and writes of that table wait), so it is an explicit operator step.

    ``ANALYZE`` runs with each rewrite: ``pg_statistic`` keeps a sample of each column's
    values (most common values, histogram bounds), which may quote purged text; the new
    sample is taken from the remaining rows, and ``pg_statistic`` itself is then rewritten so
    the old sample's dead tuples leave its files. Then :func:`retire_wal`.
    ``conn`` must be in autocommit (VACUUM cannot run in a transaction)."""
    for table in TEXT_TABLES:
        conn.execute(f"VACUUM (FULL, ANALYZE) {table}")
    # Only a superuser or the database owner may vacuum a system catalog (others get a
    # warning and a skip, not an error): say whether it ran.
    row = conn.execute(
        "SELECT r.rolsuper OR d.datdba = r.oid FROM pg_roles r, pg_database d"
        " WHERE r.rolname = current_user AND d.datname = current_database()"
    ).fetchone()
    statistics = bool(row and row[0])
    if statistics:
        conn.execute("VACUUM FULL pg_statistic")
    return Compaction(statistics, retire_wal(conn))


# Two switches: the first closes the segment the rewrite ended in, the second the one holding
# the first checkpoint record, so every segment written before the compaction precedes the
# last checkpoint's redo point.
_WAL_SWITCHES = 2


def retire_wal(conn: psycopg.Connection) -> bool:
    """Close the current WAL segment and checkpoint, so every segment written so far (they
    hold the purged rows as they were inserted) precedes the redo point and the checkpoint
    removes it. With ``wal_recycle=off`` (the local cluster) removed segments are unlinked;
    with recycling on they are renamed for reuse and keep their bytes until overwritten.
    Segments ``wal_keep_size``, a replication slot or an unarchived ``archive_mode`` hold stay.
    False when the role may not (``pg_switch_wal`` and ``CHECKPOINT`` need a superuser or
    granted rights): the segments then go as the server recycles them."""
    try:
        for _ in range(_WAL_SWITCHES):
            conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        return False
    return True
