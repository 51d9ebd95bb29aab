"""Checks on the ZIP containers of Office files and EPUBs before any parser opens them.

DOCX, PPTX, XLSX, EPUB and OpenDocument files are ZIP archives of XML parts. The parsers
(python-docx, python-pptx, openpyxl, EbookLib, ``ingest/opendocument.py``) trust the
archive, so a zip bomb, a part with a DTD (entity expansion, external entities) or an
encrypted file is refused here with its own reason code before they see it. The worker's
memory ceiling stays the backstop for whatever gets past.

Password-protected Office files are not ZIPs at all: Office wraps the encrypted package in
an OLE compound file with an ``EncryptedPackage`` stream. Password-protected OpenDocument
files are ZIPs whose manifest says their parts are encrypted (``encrypted`` below).
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable

from core.errors import ParseError

ZIP_MAGIC = b"PK\x03\x04"
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# Real Office files unpack to a few times their size; text-heavy XML compresses ~10-20x.
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
MAX_RATIO = 200
MAX_MEMBERS = 20_000
_PROLOGUE_WINDOW = 64 * 1024
_ROOT = re.compile(rb"<[A-Za-z_]")
_DTD = re.compile(rb"<!(?:DOCTYPE|ENTITY)\b", re.IGNORECASE)
_ENTITY = re.compile(rb"<!ENTITY\b", re.IGNORECASE)


def open_zip(
    data: bytes,
    *,
    allow_doctype: bool = False,
    encrypted: Callable[[zipfile.ZipFile], bool] | None = None,
) -> zipfile.ZipFile:
    """The archive, after checking its size, ratio, member count and XML prologues.

    Args:
        data: The file's bytes.
        allow_doctype: Accept ``<!DOCTYPE html>`` (XHTML in EPUBs); entity declarations are
            refused either way.
        encrypted: Whether the format's own metadata says its parts are encrypted (an
            OpenDocument manifest's ``encryption-data``); asked after the size checks and
            before the prologues, whose encrypted bytes are not XML.

    Raises:
        ParseError: ``encrypted_document`` (an OLE-wrapped encrypted package),
            ``corrupt_document`` (not a readable ZIP), ``zip_bomb`` (too large unpacked, too
            high a ratio or too many members) or ``unsafe_xml`` (a DTD or entity declaration).
    """
    if data.startswith(OLE_MAGIC):
        raise ole_error(data)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ParseError(
            f"not a readable ZIP container ({type(exc).__name__})", code="corrupt_document"
        ) from exc
    if len(members) > MAX_MEMBERS:
        raise ParseError(f"the archive has {len(members)} members", code="zip_bomb")
    unpacked = sum(member.file_size for member in members)
    if unpacked > MAX_UNPACKED_BYTES or unpacked > MAX_RATIO * max(len(data), 1024 * 1024):
        raise ParseError(f"the archive unpacks to {unpacked} bytes from {len(data)}", code="zip_bomb")
    if any(member.flag_bits & 0x1 for member in members):
        raise ParseError("the archive's members are encrypted", code="encrypted_document")
    if encrypted is not None and encrypted(archive):
        raise ParseError("the file is password-protected", code="encrypted_document")
    for member in members:
        if member.filename.lower().endswith((".xml", ".rels", ".xhtml", ".html", ".htm", ".opf", ".ncx")):
            _check_prologue(archive, member, allow_doctype)
    return archive


def ole_error(data: bytes) -> ParseError:
    """An OLE compound file: an encrypted OOXML package, or a legacy binary Office file."""
    if "EncryptedPackage".encode("utf-16-le") in data or b"EncryptionInfo" in data:
        return ParseError("the file is password-protected", code="encrypted_document")
    return ParseError(
        "a legacy binary Office file (.doc, .xls, .ppt): save it as .docx, .xlsx or .pptx",
        code="unsupported_type",
    )


def _check_prologue(archive: zipfile.ZipFile, member: zipfile.ZipInfo, allow_doctype: bool) -> None:
    """A DTD must come before the root element: a part whose root does not start within the
    window (a prologue padded to hide one) is refused too."""
    try:
        with archive.open(member) as part:
            head = part.read(_PROLOGUE_WINDOW)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise ParseError(
            f"an archive member is damaged ({type(exc).__name__})", code="corrupt_document"
        ) from exc
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        head = head.decode("utf-16", errors="ignore").encode()
    root = _ROOT.search(head)
    prologue = head[: root.start()] if root else head
    pattern = _ENTITY if allow_doctype else _DTD
    if pattern.search(prologue) or (root is None and len(head) == _PROLOGUE_WINDOW):
        raise ParseError("an XML part declares a DTD or entities", code="unsafe_xml")
