"""Parser dispatch: sniff the real content type, pick a parser, and contain its failures.

``parse_document`` is the only entry point the pipeline needs: whatever the bytes are, it
returns a ``ParsedDocument`` or raises ``ParseError`` with a stable ``code``.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import PurePosixPath

from core.errors import ParseError
from core.records import ParsedDocument, SourceDocument
from ingest import docx, eml, epub, html, markdown, ocr, odp, ods, odt, opendocument, pdf, pptx, sheets, text
from ingest.archive import OLE_MAGIC, ZIP_MAGIC, ole_error
from ingest.decoding import decode_text
from ingest.files import MIME_BY_SUFFIX
from ingest.limits import reject_binary
from ingest.ocr import OcrOptions
from ragline_client.models import MIME_TYPES, mime_for_name

PDF = "application/pdf"
HTML = "text/html"
MARKDOWN = "text/markdown"
PLAIN = "text/plain"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
CSV = "text/csv"
EPUB = "application/epub+zip"
EML = "message/rfc822"
ODT = opendocument.ODT
ODP = opendocument.ODP
ODS = opendocument.ODS
PNG = "image/png"
JPEG = "image/jpeg"
TIFF = "image/tiff"

Parser = Callable[[bytes, OcrOptions], ParsedDocument]


def _plain(parse: Callable[[bytes], ParsedDocument]) -> Parser:
    return lambda data, _ocr: parse(data)


PARSERS: dict[str, Parser] = {
    PDF: pdf.parse,
    HTML: _plain(html.parse),
    MARKDOWN: _plain(markdown.parse),
    PLAIN: _plain(text.parse),
    DOCX: _plain(docx.parse),
    PPTX: _plain(pptx.parse),
    XLSX: _plain(sheets.parse_xlsx),
    CSV: _plain(sheets.parse_csv),
    EPUB: _plain(epub.parse),
    ODT: _plain(odt.parse),
    ODP: _plain(odp.parse),
    ODS: _plain(ods.parse),
    EML: lambda data, options: eml.parse(data, _attachment_parser(options)),
    PNG: ocr.parse_image,
    JPEG: ocr.parse_image,
    TIFF: ocr.parse_image,
}
# Formats whose bytes are binary by nature: the binary-content check is for text formats.
_BINARY = frozenset({PDF, DOCX, PPTX, XLSX, EPUB, ODT, ODP, ODS, PNG, JPEG, TIFF})
# A ZIP is told apart by the part only its kind has, or (EPUB, OpenDocument) by the type its
# ``mimetype`` member names.
_ZIP_KINDS = (("word/document.xml", DOCX), ("ppt/presentation.xml", PPTX), ("xl/workbook.xml", XLSX))
_MIMETYPE_KINDS = frozenset({EPUB, ODT, ODP, ODS})
_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", PNG), (b"\xff\xd8\xff", JPEG), (b"II*\x00", TIFF), (b"MM\x00*", TIFF))

_ALIASES = {
    "application/x-pdf": PDF,
    "application/xhtml+xml": HTML,
    "text/x-markdown": MARKDOWN,
    "text/md": MARKDOWN,
    "application/csv": CSV,
    "text/comma-separated-values": CSV,
    "image/jpg": JPEG,
    "image/pjpeg": JPEG,
    "image/tif": TIFF,
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
    if data.startswith(ZIP_MAGIC):
        return _zip_kind(data) or mime
    if data.startswith(OLE_MAGIC):
        raise ole_error(data)
    for magic, image in _IMAGE_MAGIC:
        if data.startswith(magic):
            return image
    if mime in _BINARY and mime != PDF and data.strip():
        if _looks_like_text(data):
            return PLAIN
        raise ParseError(f"declared {mime} but the content is not one", code="mislabelled_content")
    if mime == PDF and data.strip():
        if _looks_like_text(data):
            return PLAIN
        raise ParseError("declared application/pdf but the content is not a PDF", code="mislabelled_content")
    return mime


def parse_document(doc: SourceDocument, ocr_options: OcrOptions | None = None) -> ParsedDocument:
    """Parse a source document with the parser for its (sniffed) content type.

    Args:
        doc: The document as the connector pushed it.
        ocr_options: When and how image-only PDF pages and images are OCR'd (default:
            ``auto``, English).

    Returns:
        The parsed document; a connector-supplied title wins over a parsed one, and a
        corrected content type is reported in ``warnings``.

    Raises:
        ParseError: ``unsupported_type``, ``empty_document``, ``mislabelled_content``,
            ``binary_content`` (a text format whose bytes are not text), ``parse_timeout``,
            a parser's own code (``corrupt_pdf``, ``encrypted_pdf``, ``image_only_pdf``,
            ``encrypted_document``, ``corrupt_document``, ``zip_bomb``, ``unsafe_xml``,
            ``too_many_cells``, ``too_many_slides``, ``image_too_large``, ``ocr_failed``)
            or ``parse_failed`` for anything unexpected. No other exception escapes.
    """
    declared = _normalise(doc.mime_type)
    if not doc.content.strip():
        raise ParseError("the document is empty", code="empty_document")
    try:
        mime = sniff_mime(doc.content, doc.mime_type)
        parser = PARSERS.get(mime)
        if parser is None:
            raise ParseError(f"unsupported content type: {mime[:100]}", code="unsupported_type")
        if mime not in _BINARY:
            _reject_binary(doc.content)
        parsed = parser(doc.content, ocr_options or OcrOptions())
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


def _attachment_parser(options: OcrOptions) -> eml.AttachmentParser:
    """An e-mail attachment through the same dispatch, one level deep: an attached message
    is parsed without its own attachments (they are named in its warnings)."""

    def parse_attachment(
        data: bytes, declared: str, name: str
    ) -> tuple[str, ParsedDocument] | ParseError | None:
        mime = _normalise(declared)
        if mime not in PARSERS or mime == "application/octet-stream":
            mime = MIME_BY_SUFFIX.get(PurePosixPath(name).suffix.lower(), mime)
        if mime not in PARSERS:
            return None
        try:
            mime = sniff_mime(data, mime)
            if mime not in _BINARY:
                _reject_binary(data)
            if mime == EML:  # its own attachments are only named in its warnings
                return mime, replace(eml.parse(data), attachments=())
            if mime not in PARSERS:
                return None
            parsed = PARSERS[mime](data, options)
            if not parsed.text.strip():
                raise ParseError("the attachment has no text", code="empty_document")
            return mime, parsed
        except ParseError as exc:
            return exc
        except Exception as exc:  # a parser's failure costs the attachment only
            return ParseError(f"parsing failed: {type(exc).__name__}", code="parse_failed")

    return parse_attachment


def _zip_kind(data: bytes) -> str | None:
    """DOCX, PPTX, XLSX, EPUB, ODT, ODP or ODS by the part that names the kind; None for any
    other ZIP."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            if "mimetype" in names and archive.getinfo("mimetype").file_size < 64:
                named = archive.read("mimetype").strip().decode("ascii", errors="replace")
                if named in _MIMETYPE_KINDS:
                    return named
    except (zipfile.BadZipFile, ValueError, OSError, zlib.error, EOFError):
        return None
    return next((kind for part, kind in _ZIP_KINDS if part in names), None)


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
