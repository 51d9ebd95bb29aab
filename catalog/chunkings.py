"""Chunking as a property of the corpus: which chunk settings the documents' current versions
were cut with, and re-pointing documents at their versions cut with another.

A re-chunking migration (``jobs.rechunk``) gives each document a new version cut with new
settings from the same parsed text, its content hash derived from the version it was cut
from (:func:`rechunked_hash`). Both versions stay in the catalog until a purge collects the
hidden one, so an alias moved back to an index version built with the old settings can make
the old versions visible again instead of serving the new chunks from its delta.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg.rows import class_row

from catalog.changes import record_change

# Documents an audit entry names (a swap long after a migration may keep many: the count is exact).
KEPT_NAMED = 100


def rechunked_hash(content_hash: str, chunking: str) -> str:
    """The content hash of a version re-chunked with ``chunking`` from one hashed ``content_hash``."""
    return hashlib.sha256(f"{content_hash}|{chunking}".encode()).hexdigest()


def live_chunkings(conn: psycopg.Connection) -> dict[str | None, int]:
    """How many live documents' current versions were cut with each chunking (None: unknown,
    a version written before versions recorded it)."""
    rows = conn.execute(
        "SELECT v.chunking, count(*) FROM documents d JOIN document_versions v"
        " ON v.doc_id = d.doc_id AND v.version = d.current_version"
        " WHERE d.state = 'active' GROUP BY v.chunking"
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def dominant_chunking(counts: dict[str | None, int]) -> str | None:
    """The known chunking most documents have (ties: the smallest label), or None."""
    known = [(n, label) for label, n in counts.items() if label is not None]
    return min(known, key=lambda t: (-t[0], t[1]))[1] if known else None


@dataclass(frozen=True, slots=True)
class VersionFacts:
    version: int
    content_hash: str
    chunking: str | None
    chunk_count: int
    chunks_left: int  # rows still in ``chunks`` (0 once a purge collected the version)


@dataclass(frozen=True, slots=True)
class Misaligned:
    doc_id: int
    tenant_id: str
    external_id: str
    current_version: int
    chunking: str


@dataclass(frozen=True, slots=True)
class Alignment:
    """What :func:`align_documents` did: documents re-pointed, and those left as they were."""

    chunking: str
    restored: int = 0
    kept: tuple[str, ...] = field(default_factory=tuple)  # "tenant/external_id": no such version

    def as_json(self) -> dict[str, object]:
        """For an audit entry: the first ``KEPT_NAMED`` kept documents by name, all by count."""
        kept = list(self.kept[:KEPT_NAMED])
        return {
            "chunking": self.chunking,
            "restored": self.restored,
            "kept": kept,
            "kept_total": len(self.kept),
        }


def misaligned(conn: psycopg.Connection, *, chunking: str) -> list[Misaligned]:
    """Live documents whose current version was cut with another known chunking, locked
    for the caller's transaction."""
    with conn.cursor(row_factory=class_row(Misaligned)) as cur:
        return cur.execute(
            "SELECT d.doc_id, d.tenant_id, d.external_id, d.current_version, v.chunking FROM documents d"
            " JOIN document_versions v ON v.doc_id = d.doc_id AND v.version = d.current_version"
            " WHERE d.state = 'active' AND v.chunking IS NOT NULL AND v.chunking <> %s"
            " ORDER BY d.doc_id FOR UPDATE OF d",  # an ingest of one of them waits for the swap
            (chunking,),
        ).fetchall()


def version_facts(conn: psycopg.Connection, *, doc_id: int) -> list[VersionFacts]:
    """Every version of one document, oldest first, with the chunk rows it still has."""
    with conn.cursor(row_factory=class_row(VersionFacts)) as cur:
        return cur.execute(
            "SELECT v.version, v.content_hash, v.chunking, v.chunk_count,"
            " (SELECT count(*) FROM chunks c WHERE c.doc_id = v.doc_id AND c.version = v.version)"
            " AS chunks_left FROM document_versions v WHERE v.doc_id = %s ORDER BY v.version",
            (doc_id,),
        ).fetchall()


def same_content_version(versions: Sequence[VersionFacts], *, current: int, chunking: str) -> int | None:
    """The newest version cut with ``chunking`` from the same parsed content as ``current``
    (linked through re-chunked hashes) whose chunks are still stored; None when there is none."""
    root: dict[int, int] = {}
    for v in versions:  # oldest first: a re-chunked version's source is already rooted
        source = next(
            (
                u
                for u in versions
                if u.version < v.version
                and rechunked_hash(u.content_hash, v.chunking or "") == v.content_hash
            ),
            None,
        )
        root[v.version] = root[source.version] if source is not None else v.version
    if current not in root:
        return None
    found = [
        v.version
        for v in versions
        if v.version != current
        and v.chunking == chunking
        and root[v.version] == root[current]
        and (v.chunks_left > 0 or v.chunk_count == 0)
    ]
    return max(found) if found else None


def repoint(conn: psycopg.Connection, *, doc: Misaligned, version: VersionFacts) -> None:
    """Make ``version`` the document's visible version again, in the caller's transaction: the
    current version's chunks become hidden (tombstoned, so a purge collects them later) and
    the restored version's chunks visible (their tombstones dropped)."""
    conn.execute(
        "INSERT INTO tombstones (chunk_row, doc_id, reason) SELECT chunk_row, doc_id, 'superseded'"
        " FROM chunks WHERE doc_id = %s AND version = %s ON CONFLICT DO NOTHING",
        (doc.doc_id, doc.current_version),
    )
    conn.execute(
        "DELETE FROM tombstones t USING chunks c WHERE t.chunk_row = c.chunk_row"
        " AND c.doc_id = %s AND c.version = %s",
        (doc.doc_id, version.version),
    )
    conn.execute(
        "UPDATE documents SET current_version = %s, content_hash = %s, updated_at = now() WHERE doc_id = %s",
        (version.version, version.content_hash, doc.doc_id),
    )
    record_change(conn, tenant_id=doc.tenant_id, kind="version", doc_id=doc.doc_id)


def align_documents(conn: psycopg.Connection, *, chunking: str) -> Alignment:
    """Re-point every live document cut with another chunking at its version cut with
    ``chunking`` from the same content, in the caller's transaction. A document with no such
    version (changed since, or its old version purged) keeps its current one and is named in
    ``kept``: it stays searchable, chunked differently, until it is re-ingested or re-chunked."""
    restored, kept = 0, []
    for doc in misaligned(conn, chunking=chunking):
        versions = version_facts(conn, doc_id=doc.doc_id)
        target = same_content_version(versions, current=doc.current_version, chunking=chunking)
        if target is None:
            kept.append(f"{doc.tenant_id}/{doc.external_id}")
            continue
        repoint(conn, doc=doc, version=next(v for v in versions if v.version == target))
        restored += 1
    return Alignment(chunking, restored, tuple(kept))


def align_to_version(conn: psycopg.Connection, *, version_id: str) -> Alignment | None:
    """:func:`align_documents` to the chunking ``version_id`` was built with, in the caller's
    transaction (the one that points an alias at it); None when it recorded none."""
    row = conn.execute(
        "SELECT params->>'chunking' FROM index_versions WHERE version_id = %s", (version_id,)
    ).fetchone()
    if row is None or not row[0]:
        return None
    return align_documents(conn, chunking=str(row[0]))
