"""The commit stage of an ingestion job: one outcome and its job item, in one transaction.

Runs in the driver (inline or Ray path alike), so progress is durable per item and a
resumed job redoes only what is still pending; a finished item is never written twice.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import psycopg

from catalog import documents as docs_repo
from catalog import jobs as jobs_repo
from catalog import reembed as reembed_repo
from catalog import secrets as secrets_repo
from catalog.documents import DocumentRow
from core.records import Committable, Embedded, Failed, SourceDocument, Unchanged
from ingest.parsed_store import encode_parsed, stored_metadata
from ingest.pipeline import with_version


def commit(
    conn: psycopg.Connection,
    item: Committable,
    *,
    model: str,
    extra_vectors: Mapping[str, np.ndarray] | None = None,
    chunking: str | None = None,
) -> str:
    """Write one outcome and its job item in one transaction; returns the item state.

    ``extra_vectors`` are the item's vectors for other models (a migration's dual write),
    committed in the same transaction. Returns ``skipped`` when the item was already
    finished (a resumed job racing itself).
    """
    with conn.transaction():
        if isinstance(item, Failed):
            done = jobs_repo.finish_item(
                conn,
                job_id=item.ref.job_id,
                item_no=item.ref.item_no,
                state="failed",
                error_code=item.code,
                error_message=item.message,
            )
            return "failed" if done else "skipped"
        if isinstance(item, Unchanged):
            done = jobs_repo.finish_item(
                conn,
                job_id=item.ref.job_id,
                item_no=item.ref.item_no,
                state="unchanged",
                doc_id=item.doc_id,
                version=item.version,
            )
            return "unchanged" if done else "skipped"
        return _commit_embedded(conn, item, model=model, extra_vectors=extra_vectors, chunking=chunking)


def _commit_embedded(
    conn: psycopg.Connection,
    item: Embedded,
    *,
    model: str,
    extra_vectors: Mapping[str, np.ndarray] | None,
    chunking: str | None,
) -> str:
    p, src = item.prepared, item.prepared.source
    if not jobs_repo.item_is_pending(conn, job_id=p.ref.job_id, item_no=p.ref.item_no):
        return "skipped"
    current = docs_repo.lock_for_write(
        conn, tenant_id=src.tenant_id, external_id=src.external_id, mime_type=src.mime_type
    )
    owner = docs_repo.foreign_owner(current, src.connector)
    if owner is not None:
        # Claimed by another connector since the prepare stage looked: checked again under the lock.
        done = jobs_repo.finish_item(
            conn,
            job_id=p.ref.job_id,
            item_no=p.ref.item_no,
            state="failed",
            error_code=docs_repo.FOREIGN_CODE,
            error_message=docs_repo.foreign_message(src.external_id, owner),
        )
        return "failed" if done else "skipped"
    # A connector's write makes the document its own; a plain push leaves a live document's
    # owner as it is and a new or revived one unowned.
    if src.connector is not None or current.state != "active":
        docs_repo.set_connector(conn, doc_id=current.doc_id, connector=src.connector)
    if current.state == "active" and current.content_hash == p.content_hash:
        # Another job committed the same content meanwhile: only the ACL and description may differ.
        docs_repo.update_acl_if_changed(conn, doc=current, acl=src.acl)
        refresh_description(conn, current, src)
        done = jobs_repo.finish_item(
            conn,
            job_id=p.ref.job_id,
            item_no=p.ref.item_no,
            state="unchanged",
            doc_id=current.doc_id,
            version=current.current_version,
        )
        return "unchanged" if done else "skipped"
    version = docs_repo.next_version(conn, doc=current)
    chunks = with_version(
        p.chunks,
        tenant_id=src.tenant_id,
        external_id=src.external_id,
        version=version,
        key=secrets_repo.chunk_id_key(conn),
    )
    result = docs_repo.commit_version(
        conn,
        doc=current,
        version=version,
        mime_type=src.mime_type,
        title=p.title or src.title,
        metadata={**p.parsed.metadata, **src.metadata} if p.parsed is not None else src.metadata,
        acl=src.acl,
        content_hash=p.content_hash,
        byte_size=len(src.content),
        page_count=p.page_count,
        warnings=p.warnings,
        chunks=chunks,
        vectors=item.vectors,
        model=model,
        extra_vectors=extra_vectors,
        parsed_body=encode_parsed(p.parsed) if p.parsed is not None else None,
        chunking=chunking,
    )
    jobs_repo.finish_item(
        conn,
        job_id=p.ref.job_id,
        item_no=p.ref.item_no,
        state="succeeded",
        doc_id=result.doc_id,
        version=result.version,
        chunks=sum(1 for c in chunks if c.level == 0),
        pages=p.page_count,
        warnings=p.warnings,
    )
    return "succeeded"


def refresh_description(conn: psycopg.Connection, doc: DocumentRow, source: SourceDocument) -> bool:
    """For an unchanged re-push: apply the source's new metadata (a renamed file's ``path``,
    an edited ACL map's ``metadata``) without a new version, as a commit would have set it:
    the file's own metadata (an e-mail's From/To) under the pushed metadata. The title needs
    nothing here: it is part of the content hash, so a new title is a new version.

    The common re-push changes nothing and costs no read: the stored parsed body is read only
    when the pushed metadata differs from the document's. Returns whether anything changed.
    """
    if doc.state != "active" or doc.current_version is None:
        return False
    same = all(k in doc.metadata and doc.metadata[k] == v for k, v in source.metadata.items())
    if same and len(source.metadata) == len(doc.metadata):
        return False
    blob = reembed_repo.parsed_text(conn, doc_id=doc.doc_id, version=doc.current_version)
    file_metadata = stored_metadata(blob) if blob is not None else None
    # A body stored before the file's metadata was: keep no key the source dropped but those
    # the file gave (unknown then), so only the pushed keys are certain: they win.
    metadata = {**(file_metadata or {}), **source.metadata}
    if metadata == dict(doc.metadata):
        return False
    docs_repo.set_description(conn, doc=doc, title=doc.title, metadata=metadata)
    return True
