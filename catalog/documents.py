"""Documents, versions, chunks, embeddings and tombstones.

Visibility lives on the document row: a chunk is visible iff its document is active and the
chunk belongs to ``current_version``. A version swap, a delete and an ACL change are each one
UPDATE of that row (plus tombstones and a change record) in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import kwargs_row
from psycopg.types.json import Jsonb

from catalog.changes import record_change
from core.errors import ConflictError, NotFoundError
from core.records import Acl, Chunk


@dataclass(frozen=True, slots=True)
class DocumentRow:
    doc_id: int
    tenant_id: str
    external_id: str
    source: str | None
    title: str | None
    mime_type: str
    content_hash: str | None
    current_version: int | None
    metadata: Mapping[str, Any]
    acl: Acl
    state: str
    created_at: datetime
    updated_at: datetime
    # The connector that owns it (created or claimed it); None: written by plain pushes or
    # ``ragline ingest`` only. See "connector ownership" below.
    connector: str | None = None


_DOC_COLUMNS = (
    "doc_id, tenant_id, external_id, source, title, mime_type, content_hash, current_version,"
    " metadata, acl_principals, acl_public, state, created_at, updated_at, connector"
)


def _doc(
    *, metadata: Mapping[str, Any] | None, acl_principals: list[str], acl_public: bool, **columns: Any
) -> DocumentRow:
    return DocumentRow(metadata=metadata or {}, acl=Acl(tuple(acl_principals), acl_public), **columns)


_DOC_ROW = kwargs_row(_doc)


def get_document(
    conn: psycopg.Connection, *, tenant_id: str, external_id: str, lock: bool = False
) -> DocumentRow | None:
    sql = f"SELECT {_DOC_COLUMNS} FROM documents WHERE tenant_id = %s AND external_id = %s"
    with conn.cursor(row_factory=_DOC_ROW) as cur:
        return cur.execute(sql + (" FOR UPDATE" if lock else ""), (tenant_id, external_id)).fetchone()


def documents_by_id(conn: psycopg.Connection, *, doc_ids: Sequence[int] | None) -> list[DocumentRow]:
    """The given documents, or all of them when ``doc_ids`` is None."""
    with conn.cursor(row_factory=_DOC_ROW) as cur:
        if doc_ids is None:
            return cur.execute(f"SELECT {_DOC_COLUMNS} FROM documents ORDER BY doc_id").fetchall()
        return cur.execute(
            f"SELECT {_DOC_COLUMNS} FROM documents WHERE doc_id = ANY(%s)", (list(doc_ids),)
        ).fetchall()


@dataclass(frozen=True, slots=True)
class VersionCommit:
    doc_id: int
    version: int
    chunk_count: int
    superseded: int


def commit_version(
    conn: psycopg.Connection,
    *,
    doc: DocumentRow,
    version: int,
    mime_type: str,
    title: str | None,
    metadata: Mapping[str, Any],
    acl: Acl,
    content_hash: str,
    byte_size: int,
    page_count: int,
    warnings: Sequence[str],
    chunks: Sequence[Chunk],
    vectors: np.ndarray,
    model: str,
    extra_vectors: Mapping[str, np.ndarray] | None = None,
    parsed_body: bytes | None = None,
    chunking: str | None = None,
) -> VersionCommit:
    """Write ``version`` and make it the visible one, in the caller's transaction.

    ``doc`` comes from ``lock_for_write`` in the same transaction; ``vectors`` holds one row
    per leaf chunk (level 0), in chunk order. ``extra_vectors`` holds the same rows for other
    models (a model migration's dual write); ``parsed_body`` is the compressed parsed text and
    ``chunking`` the chunk settings (``TOKENS/OVERLAP``) the chunks were cut with.
    """
    conn.execute(
        "INSERT INTO document_versions (doc_id, version, content_hash, byte_size, page_count,"
        " chunk_count, warnings, chunking) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (doc.doc_id, version, content_hash, byte_size, page_count, len(chunks), list(warnings), chunking),
    )
    _copy_chunks(
        conn,
        doc_id=doc.doc_id,
        version=version,
        chunks=chunks,
        vectors={model: vectors, **(extra_vectors or {})},
    )
    if parsed_body is not None:
        conn.execute(
            "INSERT INTO document_texts (doc_id, version, body) VALUES (%s, %s, %s)",
            (doc.doc_id, version, parsed_body),
        )
    superseded = _tombstone_current(conn, doc=doc, reason="superseded")
    conn.execute(
        "UPDATE documents SET current_version = %s, content_hash = %s, title = %s, metadata = %s,"
        " source = %s, mime_type = %s, acl_principals = %s, acl_public = %s, state = 'active',"
        " updated_at = now() WHERE doc_id = %s",
        (
            version,
            content_hash,
            title,
            Jsonb(dict(metadata)),
            _source(metadata),
            mime_type,
            sorted(set(acl.principals)),
            acl.public,
            doc.doc_id,
        ),
    )
    record_change(conn, tenant_id=doc.tenant_id, kind="version", doc_id=doc.doc_id)
    return VersionCommit(doc.doc_id, version, len(chunks), superseded)


def next_version(conn: psycopg.Connection, *, doc: DocumentRow) -> int:
    """One past every version ever written (a deleted document's numbers are not reused)."""
    row = conn.execute(
        "SELECT coalesce(max(version), 0) FROM document_versions WHERE doc_id = %s", (doc.doc_id,)
    ).fetchone()
    return (int(row[0]) if row else 0) + 1


def _source(metadata: Mapping[str, Any]) -> str | None:
    value = metadata.get("source")
    return None if value is None else str(value)


def lock_for_write(
    conn: psycopg.Connection, *, tenant_id: str, external_id: str, mime_type: str
) -> DocumentRow:
    """Create the document row if needed and lock it for this transaction."""
    conn.execute(
        "INSERT INTO documents (tenant_id, external_id, mime_type) VALUES (%s, %s, %s)"
        " ON CONFLICT (tenant_id, external_id) DO NOTHING",
        (tenant_id, external_id, mime_type),
    )
    doc = get_document(conn, tenant_id=tenant_id, external_id=external_id, lock=True)
    if doc is None:
        raise NotFoundError(f"document {external_id} vanished during upsert")
    return doc


def _copy_chunks(
    conn: psycopg.Connection,
    *,
    doc_id: int,
    version: int,
    chunks: Sequence[Chunk],
    vectors: Mapping[str, np.ndarray],
) -> None:
    if not chunks:
        return
    rows = conn.execute(
        "SELECT nextval(pg_get_serial_sequence('chunks', 'chunk_row')) FROM generate_series(1, %s)",
        (len(chunks),),
    ).fetchall()
    row_of = {c.chunk_id: int(r[0]) for c, r in zip(chunks, rows, strict=True)}
    leaves = [c for c in chunks if c.level == 0]
    for model, vecs in vectors.items():
        if len(leaves) != len(vecs):
            raise ValueError(f"{len(leaves)} leaf chunks but {len(vecs)} vectors for {model}")
    with conn.cursor() as cur:
        # Parents first so the parent_row foreign key holds row by row.
        ordered = sorted(chunks, key=lambda c: (c.level == 0, c.ordinal))
        with cur.copy(
            "COPY chunks (chunk_row, chunk_id, doc_id, version, ordinal, level, parent_row, text,"
            " char_start, char_end, page_start, page_end, section_path, kind, token_count) FROM STDIN"
        ) as copy:
            for c in ordered:
                copy.write_row(
                    (
                        row_of[c.chunk_id],
                        c.chunk_id,
                        doc_id,
                        version,
                        c.ordinal,
                        c.level,
                        row_of.get(c.parent_id) if c.parent_id else None,
                        c.text.replace("\x00", ""),
                        c.char_start,
                        c.char_end,
                        c.page_start,
                        c.page_end,
                        list(c.heading_path),
                        str(c.kind),
                        c.token_count,
                    )
                )
        with cur.copy("COPY chunk_embeddings (chunk_row, model, dim, vector) FROM STDIN") as copy:
            for model, model_vecs in vectors.items():
                vecs = np.ascontiguousarray(model_vecs, dtype="<f4")
                dim = int(vecs.shape[1]) if vecs.ndim == 2 else 0
                for c, v in zip(leaves, vecs, strict=True):
                    copy.write_row((row_of[c.chunk_id], model, dim, v.tobytes()))


def _tombstone_current(conn: psycopg.Connection, *, doc: DocumentRow, reason: str) -> int:
    if doc.current_version is None:
        return 0
    cur = conn.execute(
        "INSERT INTO tombstones (chunk_row, doc_id, reason) SELECT chunk_row, doc_id, %s FROM chunks"
        " WHERE doc_id = %s AND version = %s ON CONFLICT DO NOTHING",
        (reason, doc.doc_id, doc.current_version),
    )
    return cur.rowcount


def delete_document(
    conn: psycopg.Connection, *, tenant_id: str, external_id: str, connector: str | None = None
) -> int:
    """Tombstone every chunk of the document; returns how many. Raises NotFoundError, and
    ConflictError when ``connector`` is given and did not write the document."""
    doc = get_document(conn, tenant_id=tenant_id, external_id=external_id, lock=True)
    if doc is None or doc.state == "deleted":
        raise NotFoundError(f"no document {external_id!r}")
    _require_owner(doc, connector)
    hidden = _tombstone_current(conn, doc=doc, reason="deleted")
    conn.execute(
        "UPDATE documents SET state = 'deleted', updated_at = now() WHERE doc_id = %s", (doc.doc_id,)
    )
    record_change(conn, tenant_id=tenant_id, kind="delete", doc_id=doc.doc_id)
    return hidden


def set_acl(
    conn: psycopg.Connection, *, tenant_id: str, external_id: str, acl: Acl, connector: str | None = None
) -> DocumentRow:
    """Replace the ACL. Raises NotFoundError, and ConflictError when ``connector`` is given
    and did not write the document."""
    doc = get_document(conn, tenant_id=tenant_id, external_id=external_id, lock=True)
    if doc is None or doc.state == "deleted":
        raise NotFoundError(f"no document {external_id!r}")
    _require_owner(doc, connector)
    conn.execute(
        "UPDATE documents SET acl_principals = %s, acl_public = %s, updated_at = now() WHERE doc_id = %s",
        (sorted(set(acl.principals)), acl.public, doc.doc_id),
    )
    record_change(conn, tenant_id=tenant_id, kind="acl", doc_id=doc.doc_id)
    return doc


def set_description(
    conn: psycopg.Connection, *, doc: DocumentRow, title: str | None, metadata: Mapping[str, Any]
) -> None:
    """Replace a live document's title and metadata without a new version (an unchanged
    re-push whose source renamed or re-described it); serving follows the change."""
    conn.execute(
        "UPDATE documents SET title = %s, metadata = %s, source = %s, updated_at = now() WHERE doc_id = %s",
        (title, Jsonb(dict(metadata)), _source(metadata), doc.doc_id),
    )
    record_change(conn, tenant_id=doc.tenant_id, kind="metadata", doc_id=doc.doc_id)


def update_acl_if_changed(conn: psycopg.Connection, *, doc: DocumentRow, acl: Acl) -> bool:
    """For an unchanged re-push: apply a new ACL without a new version."""
    if sorted(set(doc.acl.principals)) == sorted(set(acl.principals)) and doc.acl.public == acl.public:
        return False
    set_acl(conn, tenant_id=doc.tenant_id, external_id=doc.external_id, acl=acl)
    return True


# --- connector ownership -----------------------------------------------------------------------
# A connector writes only documents that are new, deleted, unowned or its own (and owns them
# from then on), and deletes or re-ACLs only its own. A plain push (connector None) may write
# any document, as before connectors recorded themselves: it leaves a live document's owner as
# it is, and a new or deleted one unowned.

FOREIGN_CODE = "owned_by_other_connector"
NOT_OWNER_CODE = "not_owned_by_connector"


def foreign_owner(doc: DocumentRow | None, connector: str | None) -> str | None:
    """The other connector that owns ``doc`` when ``connector`` may not write it, else None."""
    if connector is None or doc is None or doc.state != "active" or doc.connector in (None, connector):
        return None
    return doc.connector


def foreign_message(external_id: str, owner: str) -> str:
    return (
        f"document {external_id!r} belongs to connector {owner!r}; a connector never overwrites"
        " another's documents (give this source distinct ids, e.g. an id prefix)"
    )


def foreign_documents(
    conn: psycopg.Connection, *, tenant_id: str, external_ids: Sequence[str], connector: str
) -> dict[str, str]:
    """external id -> owning connector, for those of ``external_ids`` ``connector`` may not write."""
    rows = conn.execute(
        "SELECT external_id, connector FROM documents WHERE tenant_id = %s AND external_id = ANY(%s)"
        " AND state = 'active' AND connector IS NOT NULL AND connector <> %s",
        (tenant_id, list(external_ids), connector),
    ).fetchall()
    return {str(ext): str(owner) for ext, owner in rows}


def set_connector(conn: psycopg.Connection, *, doc_id: int, connector: str | None) -> None:
    """Record the document's owner (also on a push that found its content unchanged)."""
    conn.execute(
        "UPDATE documents SET connector = %s WHERE doc_id = %s AND connector IS DISTINCT FROM %s",
        (connector, doc_id, connector),
    )


def _require_owner(doc: DocumentRow, connector: str | None) -> None:
    if connector is not None and doc.connector != connector:
        raise ConflictError(
            f"document {doc.external_id!r} was not written by connector {connector!r}",
            code=NOT_OWNER_CODE,
        )


def heading_passage_pairs(conn: psycopg.Connection, *, tenant_id: str) -> list[tuple[str, str]]:
    """(heading path or title, text) of a tenant's live leaf chunks: mined reranker training pairs."""
    rows = conn.execute(
        "SELECT coalesce(nullif(array_to_string(c.section_path, ' '), ''), d.title, ''), c.text"
        " FROM chunks c JOIN documents d ON d.doc_id = c.doc_id AND d.current_version = c.version"
        " AND d.state = 'active' WHERE d.tenant_id = %s AND c.level = 0",
        (tenant_id,),
    ).fetchall()
    return [(str(q), str(t)) for q, t in rows]


@dataclass(frozen=True, slots=True)
class LeafText:
    """One live leaf chunk's text with its document's title and its heading path."""

    doc_id: int
    chunk_id: str
    ordinal: int
    title: str
    section_path: tuple[str, ...]
    text: str


def leaf_texts_in_order(conn: psycopg.Connection, *, tenant_id: str) -> list[LeafText]:
    """A tenant's live leaf chunks in document order (document, then chunk ordinal): what
    ``ragline adapt`` mines its label-free training pairs from."""
    rows = conn.execute(
        "SELECT c.doc_id, c.chunk_id, c.ordinal, coalesce(d.title, ''), c.section_path, c.text"
        " FROM chunks c JOIN documents d ON d.doc_id = c.doc_id AND d.current_version = c.version"
        " AND d.state = 'active' WHERE d.tenant_id = %s AND c.level = 0 ORDER BY c.doc_id, c.ordinal",
        (tenant_id,),
    ).fetchall()
    return [
        LeafText(int(d), str(c), int(o), str(t), tuple(str(s) for s in (p or ())), str(x))
        for d, c, o, t, p, x in rows
    ]
