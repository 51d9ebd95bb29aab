"""Relevance feedback (migration 091): judgements of retrieve results, per tenant."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

_READABLE = (
    " FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
    " WHERE d.tenant_id = %(tenant)s AND d.state = 'active' AND c.version = d.current_version"
    " AND (d.acl_public OR d.acl_principals && %(readers)s::text[])"
)


def readable_chunk(
    conn: psycopg.Connection, *, tenant_id: str, readers: Sequence[str], chunk_id: str
) -> int | None:
    """The doc_id of ``chunk_id`` when it is live in the tenant and the readers may read it."""
    row = conn.execute(
        "SELECT d.doc_id" + _READABLE + " AND c.chunk_id = %(chunk)s",
        {"tenant": tenant_id, "readers": list(readers), "chunk": chunk_id},
    ).fetchone()
    return int(row[0]) if row else None


def readable_document(
    conn: psycopg.Connection, *, tenant_id: str, readers: Sequence[str], external_id: str
) -> int | None:
    """The doc_id of the tenant's live document ``external_id`` when the readers may read it."""
    row = conn.execute(
        "SELECT doc_id FROM documents d WHERE d.tenant_id = %(tenant)s AND d.external_id = %(ext)s"
        " AND d.state = 'active' AND (d.acl_public OR d.acl_principals && %(readers)s::text[])",
        {"tenant": tenant_id, "readers": list(readers), "ext": external_id},
    ).fetchone()
    return int(row[0]) if row else None


def logged_query(
    conn: psycopg.Connection, *, tenant_id: str, requester: str, reader: str, request_id: str
) -> str | None:
    """The query text the audit log kept for retrieve ``request_id`` made by ``requester``
    (the audit entry's actor) for ``reader`` (itself, or the end user it delegated for), if any.

    Request ids may be chosen by clients (``X-Request-ID`` is kept), so an id alone names no
    one's request: another principal's retrieve under the same id, earlier or planted later,
    is never found here.
    """
    row = conn.execute(
        "SELECT details->>'query' FROM audit_log WHERE action = 'retrieve' AND tenant_id = %s"
        " AND target = %s AND actor = %s AND coalesce(details->>'on_behalf_of', actor) = %s"
        " ORDER BY seq DESC LIMIT 1",
        (tenant_id, request_id, requester, reader),
    ).fetchone()
    return row[0] if row else None


def record(
    conn: psycopg.Connection,
    *,
    tenant_id: str,
    principal_id: str,
    request_id: str,
    doc_id: int,
    chunk_id: str | None,
    grade: int,
    query: str | None,
) -> int:
    row = conn.execute(
        "INSERT INTO feedback (tenant_id, principal_id, request_id, doc_id, chunk_id, grade, query)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING feedback_id",
        (tenant_id, principal_id, request_id, doc_id, chunk_id, grade, query),
    ).fetchone()
    assert row is not None
    return int(row[0])


def judgements(conn: psycopg.Connection, *, tenant_id: str) -> list[tuple[str, str, str, int]]:
    """(principal, query text, judged document's external id, grade) of the tenant's feedback
    that kept its query, the latest judgement of each (principal, query, document) only:
    ``ragline tune --from-feedback`` scores with them. Documents since deleted are left out."""
    return [
        (str(p), str(q), str(e), int(g))
        for p, q, e, g in conn.execute(
            "SELECT DISTINCT ON (f.principal_id, f.query, f.doc_id) f.principal_id, f.query,"
            " d.external_id, f.grade FROM feedback f JOIN documents d ON d.doc_id = f.doc_id"
            " WHERE f.tenant_id = %s AND f.query IS NOT NULL AND d.state = 'active'"
            " ORDER BY f.principal_id, f.query, f.doc_id, f.feedback_id DESC",
            (tenant_id,),
        ).fetchall()
    ]


def stored_judgements(conn: psycopg.Connection, *, tenant_id: str) -> list[tuple[str, int, str | None, int]]:
    """(query text, doc_id, chunk_id or None for a whole document, grade) of the tenant's
    feedback that kept its query, the latest judgement of each (query, document, chunk) only,
    live documents only: ``ragline adapt`` trains on them."""
    return [
        (str(q), int(d), None if c is None else str(c), int(g))
        for q, d, c, g in conn.execute(
            "SELECT DISTINCT ON (f.query, f.doc_id, f.chunk_id) f.query, f.doc_id, f.chunk_id, f.grade"
            " FROM feedback f JOIN documents d ON d.doc_id = f.doc_id"
            " WHERE f.tenant_id = %s AND f.query IS NOT NULL AND d.state = 'active'"
            " ORDER BY f.query, f.doc_id, f.chunk_id, f.feedback_id DESC",
            (tenant_id,),
        ).fetchall()
    ]


def erase_documents(
    conn: psycopg.Connection, *, tenant_id: str, doc_ids: Sequence[int], request_ids: Sequence[str]
) -> int:
    """An erasure: drop the tenant's judgements of ``doc_ids``, and the query text kept beside
    any judgement of the same retrieves or of ``request_ids`` (searches that returned the
    erased documents: their text may quote them). Returns the judgements dropped."""
    dropped = conn.execute(
        "DELETE FROM feedback WHERE tenant_id = %s AND doc_id = ANY(%s) RETURNING request_id",
        (tenant_id, list(doc_ids)),
    ).fetchall()
    requests = sorted({str(r[0]) for r in dropped} | set(request_ids))
    conn.execute(
        "UPDATE feedback SET query = NULL WHERE tenant_id = %s AND request_id = ANY(%s)"
        " AND query IS NOT NULL",
        (tenant_id, requests),
    )
    return len(dropped)
