"""The stored form of a parsed document: zlib-compressed JSON of its text and sections.

Written beside each document version at ingest, so a model migration with new chunking
settings re-chunks what was parsed without asking any connector to send the source again.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from core.records import ParsedDocument, Section, SectionKind

FORMAT = 1


def encode_parsed(doc: ParsedDocument) -> bytes:
    """Sections (text, kind, headings, offsets, pages), title, page count and warnings."""
    body = {
        "format": FORMAT,
        "text": doc.text,
        "title": doc.title,
        "page_count": doc.page_count,
        "warnings": list(doc.warnings),
        # What the file itself says (an e-mail's From/To): an unchanged re-push with new
        # connector metadata merges over it again (jobs.commit.refresh_description).
        "metadata": dict(doc.metadata),
        "sections": [
            [s.text, str(s.kind), list(s.heading_path), s.char_start, s.char_end, s.page_start, s.page_end]
            for s in doc.sections
        ],
    }
    return zlib.compress(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(), 6)


def decode_parsed(blob: bytes) -> ParsedDocument:
    """The document ``encode_parsed`` stored."""
    body = json.loads(zlib.decompress(blob))
    sections = tuple(
        Section(text, SectionKind(kind), tuple(heads), start, end, p0, p1)
        for text, kind, heads, start, end, p0, p1 in body["sections"]
    )
    return ParsedDocument(
        body["text"],
        sections,
        body["title"],
        int(body["page_count"]),
        tuple(body["warnings"]),
        metadata=dict(body.get("metadata") or {}),
    )


def stored_metadata(blob: bytes) -> dict[str, Any] | None:
    """The file metadata ``encode_parsed`` stored; None when the body predates it."""
    meta = json.loads(zlib.decompress(blob)).get("metadata")
    return dict(meta) if isinstance(meta, dict) else None
