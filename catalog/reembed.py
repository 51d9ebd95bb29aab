"""Model migrations: the active target model, chunks still lacking its vectors, their writes.

A migration row exists from ``ragline reembed`` until its job ends. While one is ``active``
ingestion writes vectors for its ``model`` too (dual write) and rebuilds wait; the partial
unique index allows one active row at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from core.errors import ConflictError


@dataclass(frozen=True, slots=True)
class MigrationRow:
    job_id: uuid.UUID
    model: str
    live_model: str
    state: str
    target_version: str | None
    report: Mapping[str, Any]


_COLUMNS = "job_id, model, live_model, state, target_version, report"


def start_migration(
    conn: psycopg.Connection, *, job_id: uuid.UUID, model: str, live_model: str, chunking: str | None = None
) -> None:
    """Record the active migration; ``ConflictError`` when another one is active."""
    try:
        with conn.transaction():
            conn.execute(
                "INSERT INTO embedding_migrations (job_id, model, live_model, chunking)"
                " VALUES (%s, %s, %s, %s)",
                (job_id, model, live_model, chunking),
            )
    except psycopg.errors.UniqueViolation as exc:
        active = active_migration(conn)
        raise ConflictError(
            f"a model migration is already running (job {active.job_id if active else '?'})"
        ) from exc


def active_migration(conn: psycopg.Connection) -> MigrationRow | None:
    with conn.cursor(row_factory=class_row(MigrationRow)) as cur:
        return cur.execute(f"SELECT {_COLUMNS} FROM embedding_migrations WHERE state = 'active'").fetchone()


def get_migration(conn: psycopg.Connection, *, job_id: uuid.UUID) -> MigrationRow | None:
    with conn.cursor(row_factory=class_row(MigrationRow)) as cur:
        return cur.execute(
            f"SELECT {_COLUMNS} FROM embedding_migrations WHERE job_id = %s", (job_id,)
        ).fetchone()


def finish_migration(
    conn: psycopg.Connection, *, job_id: uuid.UUID, report: Mapping[str, Any], target_version: str | None
) -> None:
    conn.execute(
        "UPDATE embedding_migrations SET state = 'finished', report = %s, target_version = %s,"
        " finished_at = now() WHERE job_id = %s",
        (Jsonb(dict(report)), target_version, job_id),
    )


def write_models(conn: psycopg.Connection, *, alias: str) -> list[str]:
    """Models whose vectors a new chunk needs: the alias's version and the one it replaced
    (while still ready, for a rollback within the grace period), and the active target."""
    rows = conn.execute(
        "SELECT v.embedding_model FROM index_aliases a JOIN index_versions v"
        " ON v.version_id IN (a.version_id, a.previous_version) AND v.state = 'ready'"
        " WHERE a.alias = %s"
        " UNION SELECT model FROM embedding_migrations WHERE state = 'active'",
        (alias,),
    ).fetchall()
    return sorted({str(r[0]) for r in rows})


@dataclass(frozen=True, slots=True)
class MissingChunk:
    chunk_row: int
    text: str
    section_path: list[str]


def missing_chunks(conn: psycopg.Connection, *, model: str, after_row: int, limit: int) -> list[MissingChunk]:
    """Visible leaf chunks without a ``model`` vector, in row order after ``after_row``."""
    with conn.cursor(row_factory=class_row(MissingChunk)) as cur:
        return cur.execute(
            "SELECT c.chunk_row, c.text, c.section_path FROM chunks c"
            " JOIN documents d ON d.doc_id = c.doc_id AND d.current_version = c.version"
            " AND d.state = 'active'"
            " WHERE c.level = 0 AND c.chunk_row > %s AND NOT EXISTS (SELECT 1 FROM chunk_embeddings e"
            "   WHERE e.chunk_row = c.chunk_row AND e.model = %s)"
            " ORDER BY c.chunk_row LIMIT %s",
            (after_row, model, limit),
        ).fetchall()


def missing_count(conn: psycopg.Connection, *, model: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
        " AND d.current_version = c.version AND d.state = 'active'"
        " WHERE c.level = 0 AND NOT EXISTS (SELECT 1 FROM chunk_embeddings e"
        "   WHERE e.chunk_row = c.chunk_row AND e.model = %s)",
        (model,),
    ).fetchone()
    return int(row[0]) if row else 0


def write_vectors(conn: psycopg.Connection, *, model: str, rows: Sequence[int], vectors: np.ndarray) -> int:
    """Store vectors for chunks that have none for ``model`` yet; returns how many were new.

    A chunk deleted meanwhile is skipped (its row is gone), and one written twice (a resumed
    job racing itself, or the dual write) keeps its first vector.
    """
    if not rows:
        return 0
    vecs = np.ascontiguousarray(vectors, dtype="<f4")
    cur = conn.execute(
        "INSERT INTO chunk_embeddings (chunk_row, model, dim, vector)"
        " SELECT r, %s, %s, v FROM unnest(%s::bigint[], %s::bytea[]) AS t(r, v)"
        " WHERE EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_row = t.r)"
        " ON CONFLICT (chunk_row, model) DO NOTHING",
        (model, int(vecs.shape[1]), list(rows), [v.tobytes() for v in vecs]),
    )
    return cur.rowcount


def write_gate_report(conn: psycopg.Connection, *, version_id: str, gate: Mapping[str, Any]) -> None:
    """Put a migration's gate results on the target version's catalog row (``params.gate``)."""
    conn.execute(
        "UPDATE index_versions SET params = coalesce(params, '{}') || jsonb_build_object('gate', %s::jsonb)"
        " WHERE version_id = %s",
        (Jsonb(dict(gate)), version_id),
    )


@dataclass(frozen=True, slots=True)
class StaleDocument:
    """A live document whose current version was chunked with other settings."""

    doc_id: int
    tenant_id: str
    external_id: str
    version: int
    content_hash: str
    mime_type: str
    title: str | None
    chunking: str | None


def stale_documents(
    conn: psycopg.Connection, *, chunking: str, exclude: Sequence[int], limit: int
) -> list[StaleDocument]:
    """Live documents not yet chunked with ``chunking``, oldest first (``exclude``: skipped)."""
    with conn.cursor(row_factory=class_row(StaleDocument)) as cur:
        return cur.execute(
            "SELECT d.doc_id, d.tenant_id, d.external_id, d.current_version AS version, v.content_hash,"
            " d.mime_type, d.title, v.chunking FROM documents d"
            " JOIN document_versions v ON v.doc_id = d.doc_id AND v.version = d.current_version"
            " WHERE d.state = 'active' AND v.chunking IS DISTINCT FROM %s AND NOT (d.doc_id = ANY(%s))"
            " ORDER BY d.doc_id LIMIT %s",
            (chunking, list(exclude), limit),
        ).fetchall()


def parsed_text(conn: psycopg.Connection, *, doc_id: int, version: int) -> bytes | None:
    """The compressed parsed text stored at ingest, or None (ingested before it was stored)."""
    row = conn.execute(
        "SELECT body FROM document_texts WHERE doc_id = %s AND version = %s", (doc_id, version)
    ).fetchone()
    return bytes(row[0]) if row else None


@dataclass(frozen=True, slots=True)
class ParentSection:
    text: str
    section_path: list[str]
    kind: str
    char_start: int
    char_end: int
    page_start: int | None
    page_end: int | None


def parent_sections(conn: psycopg.Connection, *, doc_id: int, version: int) -> list[ParentSection]:
    """A version's parent chunks (level 1) in order: what a document without stored text
    can be re-chunked from."""
    with conn.cursor(row_factory=class_row(ParentSection)) as cur:
        return cur.execute(
            "SELECT text, section_path, kind, char_start, char_end, page_start, page_end FROM chunks"
            " WHERE doc_id = %s AND version = %s AND level = 1 ORDER BY char_start, ordinal",
            (doc_id, version),
        ).fetchall()
