"""The commit stage of an ingestion job: one outcome and its job item, in one transaction.

Runs in the driver (inline or Ray path alike), so progress is durable per item and a
resumed job redoes only what is still pending; a finished item is never written twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import psycopg

from catalog import attachments as attachments_repo
from catalog import documents as docs_repo
from catalog import erasures as erasures_repo
from catalog import jobs as jobs_repo
from catalog import reembed as reembed_repo
from catalog import secrets as secrets_repo
from catalog.documents import DocumentRow, VersionCommit
from core.records import Committable, Embedded, Failed, Prepared, SourceDocument, Unchanged
from ingest.parsed_store import encode_parsed, stored_metadata
from ingest.pipeline import ATTACHMENT_KEYS, with_version


def commit(
    conn: psycopg.Connection,
    item: Committable,
    *,
    model: str,
    extra_vectors: Mapping[str, np.ndarray] | None = None,
    chunking: str | None = None,
    child_vectors: Sequence[Mapping[str, np.ndarray]] | None = None,
) -> str:
    """Write one outcome and its job item in one transaction; returns the item state.

    ``extra_vectors`` are the item's vectors for other models (a migration's dual write),
    committed in the same transaction; ``child_vectors`` the same for each of its children
    (an e-mail's attachments, committed with it). Returns ``skipped`` when the item was
    already finished (a resumed job racing itself), ``erased`` when its id was erased after
    it was queued (nothing of it is written; the item is settled and scrubbed).
    """
    ref = item.prepared.ref if isinstance(item, Embedded) else item.ref
    with conn.transaction():
        # Checked under the erasure lock, before anything of the item is written: a purge
        # either ran before (this sees it) or waits for this commit (and erases what it wrote).
        if erasures_repo.erased_since_queued(conn, job_id=ref.job_id, item_no=ref.item_no):
            done = erasures_repo.settle_item(conn, job_id=ref.job_id, item_no=ref.item_no)
            return "erased" if done else "skipped"
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
        return _commit_embedded(
            conn,
            item,
            model=model,
            extra_vectors=extra_vectors,
            chunking=chunking,
            child_vectors=child_vectors,
        )


def _commit_embedded(
    conn: psycopg.Connection,
    item: Embedded,
    *,
    model: str,
    extra_vectors: Mapping[str, np.ndarray] | None,
    chunking: str | None,
    child_vectors: Sequence[Mapping[str, np.ndarray]] | None,
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
        attachments_repo.propagate_acl(
            conn, tenant_id=src.tenant_id, parent_doc_id=current.doc_id, acl=src.acl
        )
        refresh_descriptions(conn, current, src)
        done = jobs_repo.finish_item(
            conn,
            job_id=p.ref.job_id,
            item_no=p.ref.item_no,
            state="unchanged",
            doc_id=current.doc_id,
            version=current.current_version,
        )
        return "unchanged" if done else "skipped"
    result = _write_version(
        conn, current, p, item.vectors, model=model, extra=extra_vectors, chunking=chunking
    )
    warnings = p.warnings + _commit_children(
        conn, current, item, model=model, child_vectors=child_vectors, chunking=chunking
    )
    jobs_repo.finish_item(
        conn,
        job_id=p.ref.job_id,
        item_no=p.ref.item_no,
        state="succeeded",
        doc_id=result.doc_id,
        version=result.version,
        chunks=sum(1 for c in item.prepared.chunks if c.level == 0),
        pages=p.page_count,
        warnings=warnings,
    )
    return "succeeded"


def _write_version(
    conn: psycopg.Connection,
    current: DocumentRow,
    p: Prepared,
    vectors: np.ndarray,
    *,
    model: str,
    extra: Mapping[str, np.ndarray] | None,
    chunking: str | None,
) -> VersionCommit:
    """A new version of the locked document ``current`` with ``p``'s chunks, made visible."""
    src = p.source
    version = docs_repo.next_version(conn, doc=current)
    chunks = with_version(
        p.chunks,
        tenant_id=src.tenant_id,
        external_id=src.external_id,
        version=version,
        key=secrets_repo.chunk_id_key(conn),
    )
    return docs_repo.commit_version(
        conn,
        doc=current,
        version=version,
        mime_type=src.mime_type,
        title=p.title or src.title,
        metadata=_metadata(p),
        acl=src.acl,
        content_hash=p.content_hash,
        byte_size=p.byte_size if p.byte_size is not None else len(src.content),
        page_count=p.page_count,
        warnings=p.warnings,
        chunks=chunks,
        vectors=vectors,
        model=model,
        extra_vectors=extra,
        parsed_body=encode_parsed(p.parsed) if p.parsed is not None else None,
        chunking=chunking,
    )


def _metadata(p: Prepared) -> dict[str, object]:
    """The file's own metadata (an e-mail's From/To) under what the source gave, which wins."""
    return {**p.parsed.metadata, **p.source.metadata} if p.parsed is not None else dict(p.source.metadata)


def _commit_children(
    conn: psycopg.Connection,
    parent: DocumentRow,
    item: Embedded,
    *,
    model: str,
    child_vectors: Sequence[Mapping[str, np.ndarray]] | None,
    chunking: str | None,
) -> tuple[str, ...]:
    """Make the message's attachment set the one just parsed, under the message's lock:
    a changed attachment gets a new version, an unchanged one keeps its version (its ACL and
    description follow the message), one gone from the message is deleted. Returns warnings
    for attachments that could not be written (an id another connector owns)."""
    extras = list(child_vectors) if child_vectors is not None else [{} for _ in item.children]
    kept: set[int] = set()
    warnings: list[str] = []
    ref = item.prepared.ref
    for child, extra in zip(item.children, extras, strict=True):
        p, src = child.prepared, child.prepared.source
        if erasures_repo.erased_since_item(
            conn, tenant_id=src.tenant_id, external_id=src.external_id, job_id=ref.job_id, item_no=ref.item_no
        ):
            continue  # an attachment erased on its own after the message was queued stays erased
        current = docs_repo.lock_for_write(
            conn, tenant_id=src.tenant_id, external_id=src.external_id, mime_type=src.mime_type
        )
        if docs_repo.foreign_owner(current, src.connector) is not None:
            warnings.append(
                f"attachment_failed: {(p.title or '')[:100]} ({src.mime_type}, {docs_repo.FOREIGN_CODE})"
            )
            continue
        kept.add(current.doc_id)
        attachments_repo.link(conn, doc_id=current.doc_id, parent_doc_id=parent.doc_id)
        if src.connector is not None or current.state != "active":
            docs_repo.set_connector(conn, doc_id=current.doc_id, connector=src.connector)
        if current.state == "active" and current.content_hash == p.content_hash:
            docs_repo.update_acl_if_changed(conn, doc=current, acl=src.acl)
            metadata = _metadata(p)
            if metadata != dict(current.metadata):
                docs_repo.set_description(conn, doc=current, title=current.title, metadata=metadata)
            continue
        _write_version(conn, current, p, child.vectors, model=model, extra=extra, chunking=chunking)
    for gone in attachments_repo.children(conn, tenant_id=parent.tenant_id, parent_doc_id=parent.doc_id):
        if gone.doc_id not in kept:
            docs_repo.delete_document(conn, tenant_id=gone.tenant_id, external_id=gone.external_id)
    return tuple(warnings)


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
    file_metadata = _file_metadata(conn, doc)
    # A body stored before the file's metadata was: keep no key the source dropped but those
    # the file gave (unknown then), so only the pushed keys are certain: they win.
    metadata = {**(file_metadata or {}), **source.metadata}
    if metadata == dict(doc.metadata):
        return False
    docs_repo.set_description(conn, doc=doc, title=doc.title, metadata=metadata)
    return True


def refresh_descriptions(conn: psycopg.Connection, doc: DocumentRow, source: SourceDocument) -> None:
    """``refresh_description`` of an unchanged message and of its attachments, which inherit
    what the message was pushed with (``ingest.pipeline.attachment_source``): a new
    ``--metadata`` value reaches them without a new version, and an attachment written
    before they inherited it gets it now.

    Stored bodies are read only for an attachment that lacks a pushed key or value, or when
    the message's metadata changed (a key may be gone).
    """
    changed = refresh_description(conn, doc, source)
    children = attachments_repo.children(conn, tenant_id=doc.tenant_id, parent_doc_id=doc.doc_id)
    pushed = [(child, _pushed(child, source)) for child in children]
    stale = [(child, meta) for child, meta in pushed if changed or not _holds(child, meta)]
    if not stale:
        return
    inherited = _file_metadata(conn, doc) or {}
    for child, meta in stale:
        metadata = {**inherited, **(_file_metadata(conn, child) or {}), **meta}
        if metadata != dict(child.metadata):
            docs_repo.set_description(conn, doc=child, title=child.title, metadata=metadata)


def _pushed(child: DocumentRow, message: SourceDocument) -> dict[str, object]:
    """An attachment's metadata but its file's: the message's pushed metadata under its own keys."""
    return {**message.metadata, **{k: child.metadata[k] for k in ATTACHMENT_KEYS if k in child.metadata}}


def _holds(doc: DocumentRow, metadata: Mapping[str, object]) -> bool:
    return all(k in doc.metadata and doc.metadata[k] == v for k, v in metadata.items())


def _file_metadata(conn: psycopg.Connection, doc: DocumentRow) -> dict[str, object] | None:
    """What the live version's file said of itself (an e-mail's From/To); None: not stored."""
    if doc.current_version is None:
        return None
    blob = reembed_repo.parsed_text(conn, doc_id=doc.doc_id, version=doc.current_version)
    return stored_metadata(blob) if blob is not None else None
