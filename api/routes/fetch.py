"""``GET /v1/chunks/{chunk_id}`` and ``GET /v1/documents/{external_id}``: read what a search
returned, through the same ACL as the search (``catalog.serving`` checks tenant, liveness and
readers in SQL). A chunk or document the caller may not read answers 404, as one that does
not exist, so the answer says nothing about what the caller cannot see."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import KeyAuthDep, PoolDep, QueryPrincipal
from api.errors import error_responses
from api.schemas import ChunkOut, DocumentOut, PrincipalId
from core import validation
from core.errors import NotFoundError
from services import access
from services.access import ChunkDetail

router = APIRouter(prefix="/v1", tags=["retrieve"])

# One answer carries at most this many chunks of a document (about 2 MB of text).
MAX_DOCUMENT_CHUNKS = 2000
# Chunk ids are content hashes; anything else cannot name a chunk (and never reaches SQL).
_CHUNK_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
AsPrincipal = Annotated[
    PrincipalId | None, Query(description="the end user a delegating key reads for, as in /v1/retrieve")
]


def chunk_out(d: ChunkDetail) -> ChunkOut:
    return ChunkOut(
        chunk_id=d.chunk_id,
        document_external_id=d.external_id,
        title=d.title,
        text=d.text,
        page_range=(d.page_start, d.page_end or d.page_start) if d.page_start else None,
        section_path=list(d.section_path),
        char_offsets=(d.char_start, d.char_end),
        metadata=d.metadata,
    )


@router.get(
    "/chunks/{chunk_id}", response_model=ChunkOut, responses=error_responses(401, 403, 404, 422, 429, 503)
)
def get_chunk(
    chunk_id: str,
    principal: QueryPrincipal,
    auth: KeyAuthDep,
    pool: PoolDep,
    as_principal: AsPrincipal = None,
) -> ChunkOut:
    """One chunk by id, if the caller may read it."""
    reader = access.reader_for(auth, principal, as_principal)
    if not _CHUNK_ID.fullmatch(chunk_id):
        raise NotFoundError("no chunk with that id that this caller may read")
    with pool.connection() as conn:
        found = access.readable_chunk(conn, reader, chunk_id=chunk_id)
    if found is None:
        raise NotFoundError(f"no chunk {chunk_id!r} that this caller may read")
    return chunk_out(found)


@router.get(
    "/documents/{external_id:path}",
    response_model=DocumentOut,
    responses=error_responses(401, 403, 404, 422, 429, 503),
)
def get_document(
    external_id: str,
    principal: QueryPrincipal,
    auth: KeyAuthDep,
    pool: PoolDep,
    as_principal: AsPrincipal = None,
) -> DocumentOut:
    """A document's current text as its chunks in order, if the caller may read it."""
    validation.external_id(external_id)
    reader = access.reader_for(auth, principal, as_principal)
    with pool.connection() as conn:
        chunks = access.readable_document_chunks(
            conn, reader, external_id=external_id, limit=MAX_DOCUMENT_CHUNKS + 1
        )
    if not chunks:
        raise NotFoundError(f"no document {external_id!r} that this caller may read")
    first = chunks[0]
    return DocumentOut(
        external_id=first.external_id,
        title=first.title,
        metadata=first.metadata,
        chunks=[chunk_out(c) for c in chunks[:MAX_DOCUMENT_CHUNKS]],
        truncated=len(chunks) > MAX_DOCUMENT_CHUNKS,
    )
