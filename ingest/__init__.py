"""ragline ingest: parse documents into sections and chunk them for indexing."""

from ingest.chunking import chunk_document
from ingest.decoding import decode_text
from ingest.hashing import chunk_id, content_hash
from ingest.parse import PARSERS, parse_document, sniff_mime

__all__ = [
    "PARSERS",
    "chunk_document",
    "chunk_id",
    "content_hash",
    "decode_text",
    "parse_document",
    "sniff_mime",
]
