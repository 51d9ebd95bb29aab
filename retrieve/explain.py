"""Why a document is or is not returned to a principal: the answer behind
``POST /v1/admin/explain``, derived from the catalog, the serving snapshot and (for a query)
the real search path.

Reasons that hide the document: ``not_found`` (also for another tenant's id: no existence
oracle across tenants), ``deleted``, ``superseded``
(a chunk of an older version), ``not_in_acl``, ``filtered``, ``not_embedded``, ``no_chunks``.
Reasons that only describe it: ``in_delta`` (written after the index version was built and
served from the delta), ``below_top_k`` (visible, but not ranked in the first results for the
query). No chunk or document text is ever part of an explanation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import psycopg

from authz.acl import AclFilter, metadata_text
from catalog import documents as documents_repo
from catalog import explain as explain_repo
from catalog.documents import DocumentRow
from retrieve.serving import ServingIndex

ExplainReason = Literal[
    "not_found",
    "deleted",
    "superseded",
    "not_in_acl",
    "filtered",
    "not_embedded",
    "no_chunks",
    "in_delta",
    "below_top_k",
]
"""Every "why not?" reason: the one definition the explanation and the API schema
(``api.console_schemas.ExplainOut``) share."""

HIDING: frozenset[ExplainReason] = frozenset(
    {
        "not_found",
        "deleted",
        "superseded",
        "not_in_acl",
        "filtered",
        "not_embedded",
        "no_chunks",
    }
)
"""The reasons that hide a document; the others (``in_delta``, ``below_top_k``) only describe it."""


@dataclass(frozen=True, slots=True)
class Explanation:
    reasons: tuple[ExplainReason, ...]
    external_id: str | None
    doc_state: str | None = None
    current_version: int | None = None
    chunk_version: int | None = None
    superseded_by: int | None = None
    public: bool = False
    granting_groups: tuple[str, ...] = ()
    granting_principals: tuple[str, ...] = ()
    filtered_by: tuple[str, ...] = ()
    chunks: int = 0
    indexed_chunks: int = 0
    delta_chunks: int = 0
    chunk_rows: tuple[int, ...] = ()

    @property
    def visible(self) -> bool:
        return not HIDING.intersection(self.reasons)


def failing_filters(doc: DocumentRow, acl: AclFilter) -> tuple[str, ...]:
    """The request filters ``doc`` fails, by name (``metadata.<key>`` for metadata)."""
    f = acl.filters
    out = []
    if f.sources and doc.source not in f.sources:
        out.append("source")
    if f.mime_types and doc.mime_type not in f.mime_types:
        out.append("mime_type")
    if f.created_after and doc.created_at < f.created_after:
        out.append("created_after")
    if f.created_before and doc.created_at >= f.created_before:
        out.append("created_before")
    out += [
        f"metadata.{k}"
        for k, allowed in f.metadata.items()
        if metadata_text(doc.metadata.get(k)) not in allowed
    ]
    return tuple(out)


def explain(
    conn: psycopg.Connection,
    *,
    acl: AclFilter,
    snapshot: ServingIndex,
    model: str,
    external_id: str | None = None,
    chunk_id: str | None = None,
) -> Explanation:
    """Why the document ``external_id`` (or the one holding ``chunk_id``) is hidden or not from ``acl``."""
    tenant = acl.tenant_id
    chunk = None
    if chunk_id is not None:
        chunk = explain_repo.chunk_ref(conn, tenant_id=tenant, chunk_id=chunk_id)
        if chunk is None:  # another tenant's id answers exactly as one that does not exist
            return Explanation(("not_found",), None)
        external_id = chunk.external_id
    assert external_id is not None
    doc = documents_repo.get_document(conn, tenant_id=tenant, external_id=external_id)
    if doc is None:  # no existence oracle: another tenant's id is simply not found
        return Explanation(("not_found",), external_id)
    reasons: list[ExplainReason] = []
    if doc.state == "deleted":
        reasons.append("deleted")
    superseded_by = None
    if chunk is not None and chunk.version != doc.current_version:
        reasons.append("superseded")
        superseded_by = doc.current_version
    granting = tuple(p for p in doc.acl.principals if p.startswith("group:"))
    if not doc.acl.public and not acl.readers.intersection(doc.acl.principals):
        reasons.append("not_in_acl")
    filtered_by = failing_filters(doc, acl)
    if filtered_by:
        reasons.append("filtered")
    rows = _rows(conn, doc, chunk.chunk_row if chunk and chunk.level == 0 else None)
    indexed = int(np.count_nonzero(snapshot.in_index(np.array(rows, dtype=np.int64)))) if rows else 0
    embedded = explain_repo.embedded_rows(conn, rows=rows, model=model) if rows else 0
    if not rows:
        reasons.append("no_chunks")
    elif embedded < len(rows):
        reasons.append("not_embedded")
    if rows and indexed < len(rows) and doc.state == "active" and superseded_by is None:
        reasons.append("in_delta")
    return Explanation(
        reasons=tuple(reasons),
        external_id=external_id,
        doc_state=doc.state,
        current_version=doc.current_version,
        chunk_version=chunk.version if chunk else None,
        superseded_by=superseded_by,
        public=doc.acl.public,
        granting_groups=granting,
        granting_principals=tuple(p for p in doc.acl.principals if not p.startswith("group:")),
        filtered_by=filtered_by,
        chunks=len(rows),
        indexed_chunks=indexed,
        delta_chunks=len(rows) - indexed if doc.state == "active" else 0,
        chunk_rows=tuple(rows),
    )


def _rows(conn: psycopg.Connection, doc: DocumentRow, chunk_row: int | None) -> list[int]:
    if chunk_row is not None:
        return [chunk_row]
    if doc.current_version is None:
        return []
    return explain_repo.leaf_rows(conn, doc_id=doc.doc_id, version=doc.current_version)
