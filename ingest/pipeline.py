"""The ingestion stages as plain functions over records, shared by the in-process fast path
and the Ray pipeline (``jobs/``): prepare (hash, parse, chunk) -> embed. The outcome types
live in ``core.records``; the commit to the catalog is ``jobs.commit``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from core.errors import ParseError
from core.records import (
    Acl,
    Chunk,
    Embedded,
    Failed,
    ItemRef,
    Outcome,
    ParsedAttachment,
    ParsedDocument,
    Prepared,
    SourceDocument,
    Unchanged,
)
from index.embedder import Embedder
from ingest.chunking import chunk_document
from ingest.hashing import chunk_id, content_hash
from ingest.isolation import InProcessParser, Parser, ParseRequest
from ingest.limits import parse_deadline
from ingest.ocr import OcrOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChunkingConfig:
    """Chunk size and overlap in model tokens (``IngestSettings`` holds the defaults)."""

    chunk_tokens: int
    overlap_tokens: int
    max_chunks: int  # leaf chunks one document may have; more fails it (too_many_chunks)
    parse_timeout_seconds: float  # parsing and chunking one document; longer fails it
    ocr: OcrOptions = OcrOptions()  # when and how scanned pages and images are OCR'd

    @property
    def label(self) -> str:
        """``TOKENS/OVERLAP``, as stored on each document version."""
        return f"{self.chunk_tokens}/{self.overlap_tokens}"

    def with_label(self, label: str) -> ChunkingConfig:
        """These settings cut at ``TOKENS/OVERLAP`` instead (an index version's chunking).

        Raises:
            ValueError: ``label`` is not two integers, overlap smaller than tokens.
        """
        tokens, sep, overlap = label.partition("/")
        if not sep or not tokens.isdigit() or not overlap.isdigit() or int(overlap) >= int(tokens):
            raise ValueError(f"chunking must be TOKENS/OVERLAP with OVERLAP < TOKENS: {label!r}")
        return dataclasses.replace(self, chunk_tokens=int(tokens), overlap_tokens=int(overlap))


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


@dataclass(frozen=True, slots=True)
class PrepareRequest:
    """One item to prepare: ``current`` is (doc_id, version) of the live version whose
    content hash is ``current_hash``."""

    ref: ItemRef
    source: SourceDocument
    current_hash: str | None = None
    current: tuple[int, int] | None = None


def prepare(
    ref: ItemRef,
    source: SourceDocument,
    *,
    current_hash: str | None,
    current: tuple[int, int] | None,
    count_tokens: Callable[[str], int],
    config: ChunkingConfig,
    parser: Parser | None = None,
) -> Outcome:
    """Hash, then parse and chunk unless the content is unchanged. Never raises for bad input."""
    request = PrepareRequest(ref, source, current_hash, current)
    return prepare_batch([request], count_tokens=count_tokens, config=config, parser=parser)[0]


def prepare_batch(
    requests: Sequence[PrepareRequest],
    *,
    count_tokens: Callable[[str], int],
    config: ChunkingConfig,
    parser: Parser | None = None,
) -> list[Outcome]:
    """``prepare`` for a batch: the changed documents are parsed together (side by side on a
    ``ParsePool``; in this process without one), then chunked here one by one.

    Parsing and chunking each get ``config.parse_timeout_seconds``.
    """
    digests = [hash_source(r.source, config) for r in requests]
    unchanged = [_unchanged(r, d) for r, d in zip(requests, digests, strict=True)]
    changed = [i for i, u in enumerate(unchanged) if u is None]
    max_chars = config.max_chunks * config.chunk_tokens * _MAX_CHARS_PER_TOKEN
    parse_requests = [
        ParseRequest(requests[i].source, config.parse_timeout_seconds, max_chars, config.ocr) for i in changed
    ]
    parsed = dict(zip(changed, (parser or InProcessParser()).parse_all(parse_requests), strict=True))
    return [
        same or _chunk(request, digest, parsed[i], count_tokens, config)
        for i, (request, digest, same) in enumerate(zip(requests, digests, unchanged, strict=True))
    ]


def _unchanged(request: PrepareRequest, digest: str) -> Unchanged | None:
    if request.current is None or request.current_hash != digest:
        return None
    return Unchanged(request.ref, request.current[0], request.current[1])


def _chunk(
    request: PrepareRequest,
    digest: str,
    parsed: ParsedDocument | ParseError,
    count_tokens: Callable[[str], int],
    config: ChunkingConfig,
) -> Outcome:
    ref, source = request.ref, request.source
    if isinstance(parsed, ParseError):
        return Failed(ref, parsed.code, parsed.message)
    try:
        chunks = _chunks(parsed, source, count_tokens, config)
    except ParseError as exc:
        return Failed(ref, exc.code, exc.message)
    except Exception as exc:  # a chunker bug must fail one document, not the job
        log.exception("unexpected failure preparing item %s", ref.item_no)
        return Failed(ref, "internal_error", type(exc).__name__)
    warnings = list(parsed.warnings)
    children = tuple(
        child
        for attachment in parsed.attachments
        if (child := _attachment(request, parsed, attachment, count_tokens, config, warnings)) is not None
    )
    # The attachments travel as children; the message's stored body is the message's own.
    parsed = dataclasses.replace(parsed, attachments=(), warnings=tuple(warnings))
    return Prepared(
        ref,
        source,
        digest,
        chunks,
        parsed.page_count,
        parsed.warnings,
        parsed,
        parsed.title,
        children=children,
    )


def _chunks(
    parsed: ParsedDocument, source: SourceDocument, count_tokens: Callable[[str], int], config: ChunkingConfig
) -> tuple[Chunk, ...]:
    """The document's chunks (version 0 ids); ``too_many_chunks``/``empty_document`` raised."""
    with parse_deadline(config.parse_timeout_seconds):
        chunks = chunk_document(
            parsed,
            tenant_id=source.tenant_id,
            external_id=source.external_id,
            version=0,
            count_tokens=count_tokens,
            chunk_tokens=config.chunk_tokens,
            overlap_tokens=config.overlap_tokens,
        )
    leaves = sum(1 for c in chunks if c.level == 0)
    if leaves > config.max_chunks:
        raise ParseError(
            f"the document has {leaves} chunks, more than the limit of {config.max_chunks}",
            code="too_many_chunks",
        )
    if not leaves:
        raise ParseError("no text to index", code="empty_document")
    return tuple(chunks)


def attachment_id(message_id: str, number: int) -> str:
    """An attachment's document id: the IMAP connector's scheme, so both name it alike."""
    return f"{message_id}#attachment={number}"


# What an attachment says of itself: these win over anything it inherits from its message.
ATTACHMENT_KEYS = ("parent_external_id", "attachment_filename", "message_subject")


def attachment_source(message: SourceDocument, attachment: ParsedAttachment, subject: str) -> SourceDocument:
    """The attachment as a document of its own: the message's tenant, readers and owner; the
    metadata the message was given (a filter on it finds the attachment too) under a link to
    the message; its own id, type and file name; and no bytes (it was parsed with the message)."""
    own = dict(zip(ATTACHMENT_KEYS, (message.external_id, attachment.filename, subject), strict=True))
    return SourceDocument(
        message.tenant_id,
        attachment_id(message.external_id, attachment.number),
        attachment.mime_type,
        b"",
        attachment.filename,
        {**message.metadata, **own},
        Acl(message.acl.principals, message.acl.public),
        message.connector,
    )


def attachment_parsed(message: ParsedDocument, attachment: ParsedAttachment) -> ParsedDocument:
    """The attachment's parse with the message's file metadata (From, To, Cc, Date) under its
    own (an attached message's headers are its own): stored with it, so a later change of
    the pushed metadata merges over the same file metadata (``jobs.commit``)."""
    parsed = attachment.parsed
    return dataclasses.replace(parsed, metadata={**message.metadata, **parsed.metadata})


def _attachment(
    request: PrepareRequest,
    message: ParsedDocument,
    attachment: ParsedAttachment,
    count_tokens: Callable[[str], int],
    config: ChunkingConfig,
    warnings: list[str],
) -> Prepared | None:
    """The attachment prepared as a child of the message, or None with the reason (its
    chunking failed) in the message's ``warnings``: the message is still indexed."""
    source = attachment_source(request.source, attachment, message.title or "")
    parsed = attachment_parsed(message, attachment)
    try:
        chunks = _chunks(parsed, source, count_tokens, config)
    except ParseError as exc:
        warnings.append(
            f"attachment_failed: {attachment.filename[:100]} ({attachment.mime_type}, {exc.code})"
        )
        return None
    chunking = {
        "mime_type": attachment.mime_type,
        "chunk_tokens": config.chunk_tokens,
        "overlap_tokens": config.overlap_tokens,
    }
    digest = content_hash(attachment.digest.encode(), attachment.filename, chunking)
    return Prepared(
        request.ref,
        source,
        digest,
        chunks,
        parsed.page_count,
        parsed.warnings,
        parsed,
        attachment.filename,
        byte_size=attachment.byte_size,
    )


# No token is longer than this many characters on average: text beyond
# max_chunks * chunk_tokens * this is too many chunks without chunking it first.
_MAX_CHARS_PER_TOKEN = 32


def embed(
    batch: Sequence[Prepared],
    embedder: Embedder,
    *,
    batch_size: int | None = None,
    before_batch: Callable[[], None] | None = None,
) -> list[Embedded]:
    """Encode every leaf chunk of the batch (an e-mail's attachments' too), split back per
    document.

    With ``batch_size`` the texts go to the model in slices of that many, and
    ``before_batch`` runs before each slice: it may raise to stop (a cancelled job) so a huge
    document stops within one slice instead of after all its chunks.
    """
    texts = [c.embedding_text for p in batch for q in (p, *p.children) for c in q.chunks if c.level == 0]
    step = batch_size or max(1, len(texts))
    parts = []
    for start in range(0, len(texts), step):
        if before_batch is not None:
            before_batch()
        parts.append(embedder.embed(texts[start : start + step]))
    vectors = np.concatenate(parts) if parts else embedder.embed([])
    out, start = [], 0
    for p in batch:
        family = []
        for q in (p, *p.children):
            n = sum(1 for c in q.chunks if c.level == 0)
            family.append(Embedded(q, vectors[start : start + n]))
            start += n
        out.append(dataclasses.replace(family[0], children=tuple(family[1:])))
    return out


def with_version(
    chunks: Sequence[Chunk], *, tenant_id: str, external_id: str, version: int, key: bytes
) -> list[Chunk]:
    """Chunk ids hash the version, which is only known at commit: re-derive them, keyed with
    the deployment's chunk id ``key`` (the ids that are stored)."""
    new_id = {
        c.chunk_id: chunk_id(tenant_id, external_id, version, c.char_start, c.char_end, c.level, key=key)
        for c in chunks
    }
    return [
        dataclasses.replace(c, chunk_id=new_id[c.chunk_id], parent_id=new_id.get(c.parent_id or ""))
        for c in chunks
    ]
