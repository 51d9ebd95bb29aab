"""Records passed between stages: one frozen type per stage boundary.

SourceDocument -> ParsedDocument(sections) -> Chunk; searches return Hit. An ingestion job
item ends as one outcome: Prepared (chunked) -> Embedded (with vectors), or Unchanged, or Failed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

import numpy as np

MetadataValue = str | int | float | bool | None
Metadata = Mapping[str, MetadataValue]

EMPTY_METADATA: Metadata = MappingProxyType({})


class SectionKind(StrEnum):
    PARAGRAPH = "paragraph"
    HEADING = "heading"
    TABLE = "table"
    CODE = "code"
    LIST = "list"


@dataclass(frozen=True, slots=True)
class Acl:
    """Who may read a document: any listed principal (``user:x``, ``group:y``) or everyone."""

    principals: tuple[str, ...] = ()
    public: bool = False


@dataclass(frozen=True, slots=True)
class SourceDocument:
    """A document as a connector pushed it, before parsing."""

    tenant_id: str
    external_id: str
    mime_type: str
    content: bytes
    title: str | None = None
    metadata: Metadata = field(default_factory=lambda: EMPTY_METADATA)
    acl: Acl = Acl()
    connector: str | None = None  # the connector that pushed it (None: a plain push)


@dataclass(frozen=True, slots=True)
class Section:
    """A structural unit of a parsed document.

    ``char_start``/``char_end`` index into ``ParsedDocument.text``; pages are 1-based and
    ``None`` for formats without pages.
    """

    text: str
    kind: SectionKind
    heading_path: tuple[str, ...] = ()
    char_start: int = 0
    char_end: int = 0
    page_start: int | None = None
    page_end: int | None = None


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """A document reduced to ordered sections; ``text`` is their concatenation."""

    text: str
    sections: tuple[Section, ...]
    title: str | None = None
    page_count: int = 0
    warnings: tuple[str, ...] = ()
    # What the file itself says about the document (an e-mail's From/To/Date); the
    # connector's metadata wins over it. A dict: parse workers pickle the document back.
    metadata: Metadata = field(default_factory=dict)
    # An e-mail's attachments of a parsed type (each becomes a document of its own); a
    # skipped or failed one is named in ``warnings`` instead.
    attachments: tuple[ParsedAttachment, ...] = ()


@dataclass(frozen=True, slots=True)
class ParsedAttachment:
    """One e-mail attachment parsed in the parse worker, beside its message.

    ``number`` counts every attachment of the message from 1 (skipped ones too), so an
    attachment keeps its id ``<message id>#attachment=N`` whatever its neighbours' fate;
    ``digest`` is the sha256 of its bytes (what tells an unchanged attachment on a re-push).
    """

    number: int
    filename: str
    mime_type: str
    digest: str
    byte_size: int
    parsed: ParsedDocument


@dataclass(frozen=True, slots=True)
class Chunk:
    """A span of a document version. ``level`` 0 is a searchable leaf, 1 a parent section."""

    chunk_id: str
    ordinal: int
    text: str
    token_count: int
    char_start: int
    char_end: int
    heading_path: tuple[str, ...] = ()
    page_start: int | None = None
    page_end: int | None = None
    kind: SectionKind = SectionKind.PARAGRAPH
    level: int = 0
    parent_id: str | None = None

    @property
    def embedding_text(self) -> str:
        """What the embedder sees: the heading path as context, then the text."""
        if not self.heading_path:
            return self.text
        return " > ".join(self.heading_path) + "\n" + self.text


@dataclass(frozen=True, slots=True)
class Hit:
    """A search result: ``chunk_id`` is the catalog's int64 row id of the chunk."""

    chunk_id: int
    score: float
    source: str


@dataclass(frozen=True, slots=True)
class ItemRef:
    """One item of an ingestion job."""

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
    parsed: ParsedDocument | None = None  # stored (compressed) so a migration can re-chunk
    # The connector's title, else the one the parser found (H1, <title>, PDF metadata).
    title: str | None = None
    # An e-mail's attachments, each prepared as a document of its own (committed with it).
    children: tuple[Prepared, ...] = ()
    byte_size: int | None = None  # None: ``len(source.content)`` (a child carries no bytes)


@dataclass(frozen=True, slots=True)
class Embedded:
    """A prepared document with one vector per leaf chunk (``level`` 0), in chunk order."""

    prepared: Prepared
    vectors: np.ndarray = field(repr=False)
    children: tuple[Embedded, ...] = ()  # the prepared children's, in order


@dataclass(frozen=True, slots=True)
class Unchanged:
    """The live version ``(doc_id, version)`` already has this content."""

    ref: ItemRef
    doc_id: int
    version: int


@dataclass(frozen=True, slots=True)
class Failed:
    """The item cannot be indexed; ``code`` is a stable machine-readable reason."""

    ref: ItemRef
    code: str
    message: str


# What preparing an item gives, and what is left to commit once the prepared ones are embedded.
Outcome = Prepared | Unchanged | Failed
Committable = Embedded | Unchanged | Failed
