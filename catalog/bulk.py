"""Bulk loading of a ready-made corpus with COPY, for benchmarks that need 100k+ chunks fast.

It writes rows exactly as ingestion would leave them (version 1, current, active) but skips
the per-document transactions and the change feed: load it into an empty catalog only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from core.errors import ConflictError


@dataclass(frozen=True, slots=True)
class BulkDocument:
    doc_id: int
    external_id: str
    title: str
    content_hash: str
    chunk_count: int
    source: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    principals: list[str] = field(default_factory=list)
    public: bool = False


@dataclass(frozen=True, slots=True)
class BulkChunk:
    row: int
    chunk_id: str
    doc_id: int
    ordinal: int
    text: str
    char_start: int
    token_count: int
    vector: bytes  # little-endian float32


def bulk_load(
    conn: psycopg.Connection,
    *,
    tenant_id: str,
    documents: Iterable[BulkDocument],
    chunks: Iterable[BulkChunk],
    model: str,
    dim: int,
) -> None:
    """COPY documents (version 1 each), their chunks and the chunks' ``model`` vectors."""
    if conn.execute("SELECT count(*) FROM documents").fetchone() != (0,):
        raise ConflictError("bulk_load needs an empty catalog: the database already holds documents")
    conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING", (tenant_id,))
    n_docs = n_chunks = 0
    with conn.cursor() as cur:
        versions = []
        with cur.copy(
            "COPY documents (doc_id, tenant_id, external_id, source, title, mime_type, content_hash,"
            " current_version, metadata, acl_principals, acl_public) FROM STDIN"
        ) as copy:
            for d in documents:
                copy.write_row(
                    (d.doc_id, tenant_id, d.external_id, d.source, d.title, "text/plain", d.content_hash, 1,
                     Jsonb(d.metadata), d.principals, d.public)
                )  # fmt: skip
                versions.append((d.doc_id, 1, d.content_hash, d.chunk_count))
                n_docs = max(n_docs, d.doc_id)
        with cur.copy(
            "COPY document_versions (doc_id, version, content_hash, chunk_count) FROM STDIN"
        ) as copy:
            for v in versions:
                copy.write_row(v)
        vectors = []
        with cur.copy(
            "COPY chunks (chunk_row, chunk_id, doc_id, version, ordinal, text, char_start, char_end,"
            " section_path, kind, token_count) FROM STDIN"
        ) as copy:
            for c in chunks:
                end = c.char_start + len(c.text)
                copy.write_row(
                    (c.row, c.chunk_id, c.doc_id, 1, c.ordinal, c.text, c.char_start, end, [], "paragraph",
                     c.token_count)
                )  # fmt: skip
                vectors.append((c.row, c.vector))
                n_chunks = max(n_chunks, c.row)
        # Binary COPY: 100k x 1.5 KB of bytea would double in size as text-format hex.
        with cur.copy(
            "COPY chunk_embeddings (chunk_row, model, dim, vector) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "text", "int4", "bytea"])
            for row, vec in vectors:
                copy.write_row((row, model, dim, vec))
        cur.execute("SELECT setval(pg_get_serial_sequence('documents', 'doc_id'), %s)", (max(1, n_docs),))
        cur.execute("SELECT setval(pg_get_serial_sequence('chunks', 'chunk_row'), %s)", (max(1, n_chunks),))
