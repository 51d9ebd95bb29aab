"""The ingestion stages as plain functions over records, shared by the in-process fast path
and the Ray pipeline (``jobs/``): prepare (hash, parse, chunk) -> embed -> commit.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import psycopg

from catalog import documents as docs_repo
from catalog import jobs as jobs_repo
from core.errors import ParseError
from core.records import Chunk, SourceDocument
from index.embedder import Embedder
from ingest.chunking import chunk_document
from ingest.hashing import chunk_id, content_hash
from ingest.parse import parse_document

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChunkingConfig:
    chunk_tokens: int = 256
    overlap_tokens: int = 32


@dataclass(frozen=True, slots=True)
class ItemRef:
    job_id: uuid.UUID
    item_no: int


@dataclass(frozen=True, slots=True)
class Prepared:
    """A parsed and chunked document waiting for its vectors."""

    ref: ItemRef
    source: SourceDocument
    content_hash: str
    chunks: tuple[Chunk, ...]
    page_count: int
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Embedded:
    prepared: Prepared
    vectors: np.ndarray = dataclasses.field(repr=False)


@dataclass(frozen=True, slots=True)
class Unchanged:
    ref: ItemRef
    doc_id: int
    version: int


@dataclass(frozen=True, slots=True)
class Failed:
    ref: ItemRef
    code: str
    message: str


Outcome = Prepared | Unchanged | Failed


def hash_source(source: SourceDocument, config: ChunkingConfig) -> str:
    """Content identity: normalised bytes, title, and what changes chunking."""
    data = source.content
    if source.mime_type.startswith("text/"):
        data = data.replace(b"\r\n", b"\n")
    chunking = {
        "mime_type": source.mime_type,
        "chunk_tokens": config.chunk_tokens,
        "overlap_tokens": config.overlap_tokens,
    }
    return content_hash(data, source.title, chunking)


def prepare(
    ref: ItemRef,
    source: SourceDocument,
    *,
    current_hash: str | None,
    current: tuple[int, int] | None,
    count_tokens: Callable[[str], int],
    config: ChunkingConfig,
) -> Outcome:
    """Hash, then parse and chunk unless the content is unchanged. Never raises for bad input.

    ``current`` is (doc_id, version) of the live version whose hash is ``current_hash``.
    """
    digest = hash_source(source, config)
    if current is not None and current_hash == digest:
        return Unchanged(ref, current[0], current[1])
    try:
        parsed = parse_document(source)
        chunks = chunk_document(
            parsed,
            tenant_id=source.tenant_id,
            external_id=source.external_id,
            version=0,
            count_tokens=count_tokens,
            chunk_tokens=config.chunk_tokens,
            overlap_tokens=config.overlap_tokens,
        )
    except ParseError as exc:
        return Failed(ref, exc.code, exc.message)
    except Exception as exc:  # a parser bug must fail one document, not the job
        log.exception("unexpected failure preparing item %s", ref.item_no)
        return Failed(ref, "internal_error", type(exc).__name__)
    if not any(c.level == 0 for c in chunks):
        return Failed(ref, "empty_document", "no text to index")
    return Prepared(ref, source, digest, tuple(chunks), parsed.page_count, parsed.warnings)


def embed(batch: Sequence[Prepared], embedder: Embedder) -> list[Embedded]:
    """One encode call for every leaf chunk of the batch, split back per document."""
    texts = [c.embedding_text for p in batch for c in p.chunks if c.level == 0]
    vectors = embedder.embed(texts)
    out, start = [], 0
    for p in batch:
        n = sum(1 for c in p.chunks if c.level == 0)
        out.append(Embedded(p, vectors[start : start + n]))
        start += n
    return out


def with_version(chunks: Sequence[Chunk], *, tenant_id: str, external_id: str, version: int) -> list[Chunk]:
    """Chunk ids hash the version, which is only known at commit: re-derive them."""
    new_id = {
        c.chunk_id: chunk_id(tenant_id, external_id, version, c.char_start, c.char_end, c.level)
        for c in chunks
    }
    return [
        dataclasses.replace(c, chunk_id=new_id[c.chunk_id], parent_id=new_id.get(c.parent_id or ""))
        for c in chunks
    ]


def commit(conn: psycopg.Connection, item: Embedded | Unchanged | Failed, *, model: str) -> str:
    """Write one outcome and its job item in one transaction; returns the item state.

    Returns ``skipped`` when the item was already finished (a resumed job racing itself).
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
        return _commit_embedded(conn, item, model=model)


def _commit_embedded(conn: psycopg.Connection, item: Embedded, *, model: str) -> str:
    p, src = item.prepared, item.prepared.source
    if not jobs_repo.item_is_pending(conn, job_id=p.ref.job_id, item_no=p.ref.item_no):
        return "skipped"
    current = docs_repo.lock_for_write(
        conn, tenant_id=src.tenant_id, external_id=src.external_id, mime_type=src.mime_type
    )
    if current.state == "active" and current.content_hash == p.content_hash:
        # Another job committed the same content meanwhile: only the ACL may differ.
        docs_repo.update_acl_if_changed(conn, doc=current, acl=src.acl)
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
    chunks = with_version(p.chunks, tenant_id=src.tenant_id, external_id=src.external_id, version=version)
    result = docs_repo.commit_version(
        conn,
        doc=current,
        version=version,
        mime_type=src.mime_type,
        title=src.title,
        metadata=src.metadata,
        acl=src.acl,
        content_hash=p.content_hash,
        byte_size=len(src.content),
        page_count=p.page_count,
        warnings=p.warnings,
        chunks=chunks,
        vectors=item.vectors,
        model=model,
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
