"""Purge on delete: the bytes of deleted and superseded document versions leave the catalog
and, through a rebuild, the index files; ``ragline purge`` does it at once for one document
(an erasure request).

Hidden versions are invisible to every search from the transaction that hid them; their
bytes stay for ``retention.purge_after_seconds`` (the window in which in-flight reads finish
and an operator may still roll ``live`` back), then the maintenance tick purges them. A
rebuild then swaps ``live`` to a version built without them and forgets the rollback target
(its files hold the purged text), so GC deletes the older versions after
``index.gc_grace_seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from catalog import audit
from catalog import documents as docs_repo
from catalog import purge as purge_repo
from catalog.purge import PurgeCounts
from core.errors import NotFoundError


@dataclass(frozen=True, slots=True)
class Erasure:
    external_id: str
    deleted_now: bool  # the document was still active: deleted by the purge itself
    counts: PurgeCounts
    rebuilt: str | None = None  # the version ``live`` now serves, built without the document


def erase_document(conn: psycopg.Connection, *, tenant_id: str, external_id: str, actor: str) -> Erasure:
    """Delete (if still active) and purge one document now, audited. ``conn`` is autocommit.
    The caller then rebuilds the alias without it (``services.index.rebuild_and_forget``).

    Raises:
        NotFoundError: the tenant has no such document, active or deleted.
    """
    with conn.transaction():
        doc = docs_repo.get_document(conn, tenant_id=tenant_id, external_id=external_id, lock=True)
        if doc is None:
            raise NotFoundError(f"no document {external_id!r} in tenant {tenant_id}")
        active = doc.state == "active"
        if active:
            docs_repo.delete_document(conn, tenant_id=tenant_id, external_id=external_id)
        counts = purge_repo.purge_document(conn, doc_id=doc.doc_id)
        audit.record(
            conn,
            actor=actor,
            action="document.purge",
            tenant_id=tenant_id,
            target=external_id,
            details={
                "deleted_now": active,
                "versions": counts.versions,
                "chunks": counts.chunks,
                "job_items": counts.job_payloads,
                "via": "cli",
            },
        )
    return Erasure(external_id, active, counts)
