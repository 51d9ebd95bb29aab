"""A tenant's own settings and records: its fusion defaults, relevance feedback, the erasure
of one of its documents, and the audit log that records all of it.

Purge on delete: the bytes of deleted and superseded document versions leave the catalog
and, through a rebuild, the index files. Hidden versions are invisible to every search from
the transaction that hid them; their bytes stay for ``retention.purge_after_seconds`` (the
window in which in-flight reads finish and an operator may still roll ``live`` back), then
the maintenance tick purges them (``services.maintenance.purge_expired``). :func:`erase_document`
does it at once for one document (an erasure request, ``ragline purge``): a rebuild then
swaps ``live`` to a version built without it and forgets the rollback target (its files hold
the purged text), so GC deletes the older versions after ``index.gc_grace_seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psycopg

from authz.principals import Principal
from catalog import attachments as attachments_repo
from catalog import audit, indexes
from catalog import documents as docs_repo
from catalog import erasures as erasures_repo
from catalog import feedback as feedback_repo
from catalog import fusion as fusion_repo
from catalog import purge as purge_repo
from catalog.audit import AuditRow
from catalog.documents import DocumentRow
from catalog.fusion import FusionOverride
from catalog.purge import ChunkRefs, Compaction, PurgeCounts
from core.errors import InvalidInputError, NotFoundError
from jobs.rebuild_job import RebuildConfig
from jobs.staging import remove_staged
from retrieve.service import FusionConfig
from services.caller import Caller
from services.index import rebuild_and_forget
from services.pinned_versions import PinnedVersion, clear_pinned

__all__ = [
    "AuditRow",
    "Erasure",
    "Feedback",
    "PinnedVersion",
    "FusionOverride",
    "audit_entries",
    "erase_document",
    "fusion_defaults",
    "record_feedback",
    "reset_fusion",
    "set_fusion",
]


def fusion_defaults(conn: psycopg.Connection, *, tenant_id: str) -> FusionOverride | None:
    """The tenant's stored fusion defaults, or None when it uses the server's settings."""
    return fusion_repo.tenant_defaults(conn, tenant_id=tenant_id)


def set_fusion(
    conn: psycopg.Connection, caller: Caller, *, tenant_id: str, defaults: FusionOverride, base: FusionConfig
) -> None:
    """Replace the tenant's fusion defaults (fields left unset fall back to ``base``, the
    server's settings) and audit it; every retrieve of the tenant uses them from the commit on.

    Raises:
        InvalidInputError: over ``base`` both leg weights would be 0 (no result could score).
    """
    merged = base.merged(defaults)
    if merged.dense_weight == 0 and merged.lexical_weight == 0:
        raise InvalidInputError("fusion: with the server's settings both leg weights would be 0")
    with conn.transaction():
        fusion_repo.set_tenant_defaults(conn, tenant_id=tenant_id, defaults=defaults, actor=caller.actor)
        _fusion_audit(conn, caller, tenant_id, defaults.given())


def reset_fusion(conn: psycopg.Connection, caller: Caller, *, tenant_id: str) -> bool:
    """Drop the tenant's fusion defaults (its retrieves use the server's settings again),
    audited when it had some; True then."""
    with conn.transaction():
        dropped = fusion_repo.clear_tenant_defaults(conn, tenant_id=tenant_id)
        if dropped:
            _fusion_audit(conn, caller, tenant_id, None)
    return dropped


def _fusion_audit(
    conn: psycopg.Connection, caller: Caller, tenant_id: str, fusion: dict[str, object] | None
) -> None:
    audit.record(
        conn,
        actor=caller.actor,
        action="fusion.set",
        tenant_id=tenant_id,
        target=tenant_id,
        details={"fusion": fusion, "via": caller.via},
    )


@dataclass(frozen=True, slots=True)
class Feedback:
    """A recorded judgement; ``query_stored``: the retrieve's text was kept beside it."""

    feedback_id: int
    grade: int
    query_stored: bool


def record_feedback(
    conn: psycopg.Connection,
    caller: Caller,
    reader: Principal,
    *,
    request_id: str,
    grade: int,
    chunk_id: str | None = None,
    external_id: str | None = None,
    store_query_text: bool = False,
) -> Feedback:
    """Record ``reader``'s judgement of one result (``chunk_id``) or document
    (``external_id``) of retrieve ``request_id``, audited; with ``store_query_text``, beside
    the query text the audit kept for that retrieve when it is the caller's own (made by
    ``caller.actor`` for ``reader``): an id of anyone else's retrieve binds no query.

    Raises:
        NotFoundError: no such chunk or document that ``reader`` may read (alike, so the
            answer tells nothing of what it cannot see).
    """
    tenant = reader.tenant_id
    with conn.transaction():
        doc_id = _judged_document(conn, reader, chunk_id=chunk_id, external_id=external_id)
        query = None
        if store_query_text:
            query = feedback_repo.logged_query(
                conn,
                tenant_id=tenant,
                requester=caller.actor,
                reader=reader.principal_id,
                request_id=request_id,
            )
        feedback_id = feedback_repo.record(
            conn,
            tenant_id=tenant,
            principal_id=reader.principal_id,
            request_id=request_id,
            doc_id=doc_id,
            chunk_id=chunk_id,
            grade=grade,
            query=query,
        )
        by = "chunk" if chunk_id else "document"
        audit.record(
            conn,
            actor=caller.actor,
            action="feedback.record",
            tenant_id=tenant,
            target=request_id,
            details={"feedback_id": feedback_id, "grade": grade, "by": by, "via": caller.via},
        )
    return Feedback(feedback_id, grade, query is not None)


def _judged_document(
    conn: psycopg.Connection, reader: Principal, *, chunk_id: str | None, external_id: str | None
) -> int:
    """The doc_id a judgement is of, when ``reader`` may read the chunk or document."""
    tenant, readers = reader.tenant_id, sorted(reader.readers)
    if chunk_id is not None:
        doc_id = feedback_repo.readable_chunk(conn, tenant_id=tenant, readers=readers, chunk_id=chunk_id)
    elif external_id is not None:
        doc_id = feedback_repo.readable_document(
            conn, tenant_id=tenant, readers=readers, external_id=external_id
        )
    else:
        raise InvalidInputError("feedback names a chunk_id or an external_id")
    if doc_id is None:
        raise NotFoundError("no such chunk or document")
    return doc_id


@dataclass(frozen=True, slots=True)
class Erasure:
    external_id: str
    deleted_now: bool  # the document was still active: deleted by the purge itself
    counts: PurgeCounts
    rebuilt: str | None  # the version ``alias`` now serves, built without the document
    # Every other alias whose version (or rollback target) held it: moved, or not (no rebuild).
    pinned: tuple[PinnedVersion, ...]
    compaction: Compaction | None  # with ``compact``: the statistics and WAL steps' outcome

    @property
    def compacted(self) -> bool:
        """The catalog tables that held it were rewritten (VACUUM FULL)."""
        return self.compaction is not None


def erase_document(
    conn: psycopg.Connection,
    conninfo: str,
    caller: Caller,
    config: RebuildConfig | None,
    *,
    tenant_id: str,
    external_id: str,
    alias: str,
    compact: bool = False,
    upload_dir: Path | None = None,
) -> Erasure:
    """Delete (if still active) and purge one document now, audited, with every job item
    that carried it (pending, cancelled, failed or done: scrubbed, and those that never ran
    settled ``erased``) and their staged uploads under ``upload_dir``; the erasure is
    recorded, so no item queued before it is ever written (resume, retry, a push racing it).
    An id that never committed (its push was cancelled or failed) is erased the same way.
    Its feedback goes, and the stored query text of the searches that returned it (the audit
    entries and the feedback that copied it stay, without the text). With ``config``, rebuild
    ``alias`` without it and forget its rollback target, and move every other alias whose
    version holds it to a version built without it (``services.pinned_versions``); without,
    the aliases still holding it are returned. With ``compact``, then rewrite the tables that
    held it and the planner statistics, and retire the WAL written so far, so no byte of it
    stays in PostgreSQL's files (:func:`catalog.purge.compact`). ``conn`` is autocommit.

    Raises:
        NotFoundError: the tenant has no such document, job item or earlier erasure.
    """
    purged = _purge_now(conn, caller, tenant_id=tenant_id, external_id=external_id)
    remove_staged(purged.staged, upload_dir)  # after the commit: no item names them any more
    rebuilt, built = None, dict[str, str]()  # embedding model -> a version built without it
    if config is not None and indexes.resolve_alias(conn, alias=alias) is not None:
        rebuilt = rebuild_and_forget(conn, conninfo, config, alias=alias, caller=caller, reasons=["purge"])
        built[config.model_name] = rebuilt
    pinned = clear_pinned(conn, conninfo, config, rows=purged.chunks.rows, caller=caller, built=built)
    compaction = purge_repo.compact(conn) if compact else None
    return Erasure(external_id, purged.active, purged.counts, rebuilt, pinned, compaction)


@dataclass(frozen=True, slots=True)
class _Purged:
    active: bool  # the document was active: deleted by the purge
    counts: PurgeCounts
    staged: tuple[str, ...]  # staged uploads of its job items, to remove after the commit
    chunks: ChunkRefs  # its chunks (and its attachments'), as they were before the purge


def _purge_now(conn: psycopg.Connection, caller: Caller, *, tenant_id: str, external_id: str) -> _Purged:
    """Erase the id's job items, delete and purge its document's rows, its feedback and the
    query text of the searches that returned it, in one transaction with its audit entry."""
    with conn.transaction():
        # First the erasure lock, then item rows, then the document: a commit's order too.
        erasures_repo.lock(conn, tenant_id=tenant_id, external_id=external_id)
        if not erasures_repo.known(conn, tenant_id=tenant_id, external_id=external_id):
            doc = docs_repo.get_document(conn, tenant_id=tenant_id, external_id=external_id)
            if doc is None:
                raise NotFoundError(f"no document {external_id!r} in tenant {tenant_id}")
        items = erasures_repo.erase_items(conn, tenant_id=tenant_id, external_id=external_id)
        erasures_repo.record_erasure(conn, tenant_id=tenant_id, external_id=external_id)
        counts = PurgeCounts(job_payloads=items.items)
        doc = docs_repo.get_document(conn, tenant_id=tenant_id, external_id=external_id, lock=True)
        active = doc is not None and doc.state == "active"
        attached: list[DocumentRow] = []
        if doc is not None:
            # An e-mail's attachments are documents made from its bytes: erased with it.
            attached = attachments_repo.every_child(conn, tenant_id=tenant_id, parent_doc_id=doc.doc_id)
        doc_ids = ([doc.doc_id] if doc is not None else []) + [c.doc_id for c in attached]
        chunks = purge_repo.chunk_refs(conn, doc_ids=doc_ids)  # before the purge deletes them
        if doc is not None:
            if active:
                docs_repo.delete_document(conn, tenant_id=tenant_id, external_id=external_id)
            counts = counts + _purge_doc(conn, doc.doc_id)
        for child in attached:
            if child.state == "active":
                docs_repo.delete_document(conn, tenant_id=tenant_id, external_id=child.external_id)
            counts = counts + _purge_doc(conn, child.doc_id)
        searches = audit.erase_queries(conn, tenant_id=tenant_id, chunk_ids=chunks.ids)
        feedback_repo.erase_documents(conn, tenant_id=tenant_id, doc_ids=doc_ids, request_ids=searches)
        audit.record(
            conn,
            actor=caller.actor,
            action="document.purge",
            tenant_id=tenant_id,
            target=external_id,
            details={
                "deleted_now": active,
                "versions": counts.versions,
                "chunks": counts.chunks,
                "job_items": counts.job_payloads,
                "attachments": [c.external_id for c in attached],
                "via": caller.via,
            },
        )
    return _Purged(active, counts, items.staged_paths, chunks)


def _purge_doc(conn: psycopg.Connection, doc_id: int) -> PurgeCounts:
    """Every version of a deleted document, its parsed text and description, now."""
    counts = purge_repo.purge_document(conn, doc_id=doc_id)
    return counts + PurgeCounts(chunks=purge_repo.erase_document_rest(conn, doc_id=doc_id))


# The audit log newest first (``ragline audit``); ``principal`` matches the actor or the
# principal a key searched on behalf of. A read: the catalog's own, re-exported for the CLI.
audit_entries = audit.entries


def training_pairs(conn: psycopg.Connection, *, tenant_id: str) -> list[tuple[str, str]]:
    """(query-like text, passage) from the tenant's live chunks, the heading path or title
    standing for the query: what ``ragline reranker train --mine`` learns from."""
    from catalog.documents import heading_passage_pairs

    return [(q, t) for q, t in heading_passage_pairs(conn, tenant_id=tenant_id) if q.strip()]
