"""The link from an e-mail's attachment documents to their message (``documents.parent_doc_id``).

An attachment is an ordinary document (its own versions, chunks, ACL and owner); the link
only says which message's lifecycle it follows: the message's commit replaces the set, its
delete deletes them, its ACL change reaches them (``jobs.commit``, ``services.ingest``).
"""

from __future__ import annotations

import psycopg

from catalog import documents as docs_repo
from catalog.documents import DocumentRow
from core.records import Acl


def link(conn: psycopg.Connection, *, doc_id: int, parent_doc_id: int) -> None:
    """Record ``doc_id`` as an attachment of ``parent_doc_id``."""
    conn.execute(
        "UPDATE documents SET parent_doc_id = %s WHERE doc_id = %s AND parent_doc_id IS DISTINCT FROM %s",
        (parent_doc_id, doc_id, parent_doc_id),
    )


def children(conn: psycopg.Connection, *, tenant_id: str, parent_doc_id: int) -> list[DocumentRow]:
    """The live attachments of a message, locked for this transaction, in id order."""
    rows = conn.execute(
        "SELECT external_id FROM documents WHERE tenant_id = %s AND parent_doc_id = %s"
        " AND state = 'active' ORDER BY external_id",
        (tenant_id, parent_doc_id),
    ).fetchall()
    found = (
        docs_repo.get_document(conn, tenant_id=tenant_id, external_id=str(r[0]), lock=True) for r in rows
    )
    return [doc for doc in found if doc is not None and doc.state == "active"]


def delete_children(conn: psycopg.Connection, *, tenant_id: str, parent_doc_id: int) -> int:
    """Tombstone every live attachment of a message; returns the chunks hidden."""
    return sum(
        docs_repo.delete_document(conn, tenant_id=tenant_id, external_id=doc.external_id)
        for doc in children(conn, tenant_id=tenant_id, parent_doc_id=parent_doc_id)
    )


def propagate_acl(conn: psycopg.Connection, *, tenant_id: str, parent_doc_id: int, acl: Acl) -> int:
    """Give every live attachment of a message the message's ACL; returns how many changed."""
    return sum(
        docs_repo.update_acl_if_changed(conn, doc=doc, acl=acl)
        for doc in children(conn, tenant_id=tenant_id, parent_doc_id=parent_doc_id)
    )


def every_child(conn: psycopg.Connection, *, tenant_id: str, parent_doc_id: int) -> list[DocumentRow]:
    """Every attachment a message ever had, live or deleted, locked (an erasure takes them all)."""
    rows = conn.execute(
        "SELECT external_id FROM documents WHERE tenant_id = %s AND parent_doc_id = %s ORDER BY external_id",
        (tenant_id, parent_doc_id),
    ).fetchall()
    found = (
        docs_repo.get_document(conn, tenant_id=tenant_id, external_id=str(r[0]), lock=True) for r in rows
    )
    return [doc for doc in found if doc is not None]
