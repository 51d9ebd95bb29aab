"""Parser dispatch: sniff the real content type, pick a parser, and contain its failures.

``parse_document`` is the only entry point the pipeline needs: whatever the bytes are, it
returns a ``ParsedDocument`` or raises ``ParseError`` with a stable ``code``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from core.errors import ParseError
from core.records import ParsedDocument, SourceDocument
from ingest import html, markdown, pdf, text
from ingest.decoding import decode_text
from ingest.limits import reject_binary
from ragline_client.models import MIME_TYPES, mime_for_name

PDF = "application/pdf"
HTML = "text/html"
MARKDOWN = "text/markdown"
PLAIN = "text/plain"

PARSERS: dict[str, Callable[[bytes], ParsedDocument]] = {
    PDF: pdf.parse,
    HTML: html.parse,
    MARKDOWN: markdown.parse,
    PLAIN: text.parse,
}

_ALIASES = {
    "application/x-pdf": PDF,
    "application/xhtml+xml": HTML,
    "text/x-markdown": MARKDOWN,
    "text/md": MARKDOWN,
}
_PDF_MAGIC = b"%PDF-"
_MAGIC_WINDOW = 1024  # the PDF spec lets the header sit anywhere in the first KiB
_MAX_CONTROL_SHARE = 0.05


def sniff_mime(data: bytes, declared: str) -> str:
    """Return the content type to parse ``data`` as, correcting mislabelled PDFs.

    The ``%PDF-`` magic wins over any declaration. A declared PDF without the magic is
    parsed as plain text when it decodes as text. HTML-looking text declared as plain text
    stays plain text: the declaration is honoured unless it cannot be right.

    Args:
        data: The raw document bytes.
        declared: The content type the connector declared (parameters are ignored).

    Returns:
        A normalised content type.

    Raises:
        ParseError: ``mislabelled_content`` for a declared PDF that is neither PDF nor text.
    """
    mime = _normalise(declared)
    if _PDF_MAGIC in data[:_MAGIC_WINDOW]:
        return PDF
    if mime == PDF and data.strip():
        if _looks_like_text(data):
            return PLAIN
        raise ParseError("declared application/pdf but the content is not a PDF", code="mislabelled_content")
    return mime


def parse_document(doc: SourceDocument) -> ParsedDocument:
    """Parse a source document with the parser for its (sniffed) content type.

    Args:
        doc: The document as the connector pushed it.

    Returns:
        The parsed document; a connector-supplied title wins over a parsed one, and a
        corrected content type is reported in ``warnings``.

    Raises:
        ParseError: ``unsupported_mime_type``, ``empty_document``, ``mislabelled_content``,
            ``binary_content`` (a text format whose bytes are not text), ``parse_timeout``,
            a parser's own code (``corrupt_pdf``, ``encrypted_pdf``, ``image_only_pdf``) or
            ``parse_failed`` for anything unexpected. No other exception escapes.
    """
    declared = _normalise(doc.mime_type)
    if not doc.content.strip():
        raise ParseError("the document is empty", code="empty_document")
    try:
        mime = sniff_mime(doc.content, doc.mime_type)
        parser = PARSERS.get(mime)
        if parser is None:
            raise ParseError(f"unsupported content type: {mime[:100]}", code="unsupported_mime_type")
        if mime != PDF:
            _reject_binary(doc.content)
        parsed = parser(doc.content)
    except ParseError:
        raise
    except Exception as exc:  # the contract: only ParseError leaves this function
        # The class name only: messages of parser exceptions can quote document text.
        raise ParseError(f"parsing failed: {type(exc).__name__}", code="parse_failed") from exc
    if not parsed.text.strip():
        raise ParseError("the document has no text", code="empty_document")
    warnings = parsed.warnings
    if mime != declared:
        warnings += (f"mislabelled_content: declared {declared[:100]}, parsed as {mime}",)
    return replace(parsed, title=doc.title or parsed.title, warnings=warnings)


def _reject_binary(data: bytes) -> None:
    """``binary_content`` for bytes declared as a text format that do not decode as text."""
    decoded, warnings = decode_text(data)
    nuls = next((int(w.split()[2]) for w in warnings if w.startswith("stripped_nul")), 0)
    reject_binary(decoded, nuls)


def _normalise(mime: str) -> str:
    base = mime.split(";", 1)[0].strip().lower()
    return _ALIASES.get(base, base)


def _looks_like_text(data: bytes) -> bool:
    """Text decodes without replacement and has few control characters."""
    decoded, warnings = decode_text(data)
    if any(warning.startswith(("invalid_", "stripped_nul")) for warning in warnings) or not decoded:
        return False
    controls = sum(1 for char in decoded if ord(char) < 32 and char not in "\n\t\f")
    return controls / len(decoded) <= _MAX_CONTROL_SHARE


def detect_mime(head: bytes, *, filename: str | None, part_type: str | None) -> str | None:
    """The content type of an upload sent without one, from what the server can see.

    In order: the ``%PDF-`` magic in ``head`` (the file's first KiB); the file name's suffix;
    the multipart part's own ``Content-Type`` when it names a type the server parses; plain
    text when ``head`` reads as text. The suffix's answer is returned even when it is a type
    the server does not parse (``.docx``), so the caller can name it in its refusal.

    Returns:
        A normalised content type, or ``None`` when nothing tells (binary bytes, no name).
    """
    if _PDF_MAGIC in head[:_MAGIC_WINDOW]:
        return PDF
    by_name = mime_for_name(filename) if filename else None
    if by_name is not None:
        return _normalise(by_name)
    if part_type and _normalise(part_type) in MIME_TYPES:
        return _normalise(part_type)
    # The window may end inside a multi-byte character: try it without its last 1-3 bytes.
    if head.strip() and any(_looks_like_text(head[: len(head) - cut]) for cut in range(4)):
        return PLAIN
    return None
