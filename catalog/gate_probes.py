"""Label-free probes for the model-migration gate (``jobs/reembed_gate.py``): each tenant's own
structure (a document's title or heading path, and the document it names) and which document
each stored chunk belongs to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg.rows import class_row


@dataclass(frozen=True, slots=True)
class StructureProbe:
    """A query taken from a live document's structure, with the document's ACL to ask it as."""

    tenant_id: str
    external_id: str
    query: str
    readers: list[str]
    public: bool


def structure_probes(conn: psycopg.Connection, *, limit: int) -> list[StructureProbe]:
    """Up to ``limit`` live documents (a stable pseudo-random sample, all tenants), each with its
    title, or when it has none its first heading path (``A > B``), as the query."""
    with conn.cursor(row_factory=class_row(StructureProbe)) as cur:
        return cur.execute(
            "SELECT tenant_id, external_id, query, readers, public FROM ("
            "  SELECT DISTINCT ON (d.doc_id) d.tenant_id, d.external_id, d.acl_principals AS readers,"
            "         d.acl_public AS public,"
            "         COALESCE(NULLIF(btrim(d.title), ''), array_to_string(c.section_path, ' > ')) AS query"
            "  FROM documents d JOIN chunks c ON c.doc_id = d.doc_id"
            "  WHERE d.state = 'active'"
            "    AND (NULLIF(btrim(d.title), '') IS NOT NULL OR cardinality(c.section_path) > 0)"
            "  ORDER BY d.doc_id, c.ordinal"
            ") p WHERE length(query) BETWEEN 3 AND 500"
            " ORDER BY md5(tenant_id || '/' || external_id) LIMIT %s",
            (limit,),
        ).fetchall()


def documents_of_rows(conn: psycopg.Connection, rows: Sequence[int]) -> dict[int, int]:
    """chunk_row -> doc_id for the rows that still exist."""
    found = conn.execute(
        "SELECT chunk_row, doc_id FROM chunks WHERE chunk_row = ANY(%s)", ([int(r) for r in rows],)
    ).fetchall()
    return {int(r): int(d) for r, d in found}
