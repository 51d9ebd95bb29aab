"""Checks on the ZIP containers of Office files and EPUBs before any parser opens them.

DOCX, PPTX, XLSX, EPUB and OpenDocument files are ZIP archives of XML parts. The parsers
(python-docx, python-pptx, openpyxl, EbookLib, ``ingest/opendocument.py``) trust the
archive, so a zip bomb, a part with a DTD (entity expansion, external entities) or an
encrypted file is refused here with its own reason code before they see it. The worker's
memory ceiling stays the backstop for whatever gets past.

Every member is read by defusedxml's parser (expat refusing DTDs and entities), whatever its
name: a part's name says nothing of how a parser will read it (a main part named ``.bin``
through its relationship, an EPUB chapter named ``.txt`` through the manifest), and the
parser, not a pattern, knows the encodings (UTF-16 without a byte order mark). The parse
stops at the root element, since a DTD can only come before it. A member the parser cannot
read as XML is either not XML at all (an image: refused at its first byte) or XML in an
encoding expat lacks (UCS-4, EBCDIC, a multi-byte legacy encoding) that lxml might still read
in a downstream parser: those are refused as ``unsafe_xml`` too, failing closed.

Password-protected Office files are not ZIPs at all: Office wraps the encrypted package in
an OLE compound file with an ``EncryptedPackage`` stream. Password-protected OpenDocument
files are ZIPs whose manifest says their parts are encrypted (``encrypted`` below).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from xml.etree.ElementTree import ParseError as XmlSyntaxError
from xml.parsers import expat

import defusedxml
from defusedxml.ElementTree import DefusedXMLParser

from core.errors import ParseError

ZIP_MAGIC = b"PK\x03\x04"
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# Real Office files unpack to a few times their size; text-heavy XML compresses ~10-20x.
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
MAX_RATIO = 200
MAX_MEMBERS = 20_000
_READ = 64 * 1024
# How XML in UCS-4 or EBCDIC starts (the XML spec's Appendix F): libxml2 reads these, expat not.
_FOREIGN_XML = (
    b"\x00\x00\xfe\xff",
    b"\xff\xfe\x00\x00",
    b"\x00\x00\x00<",
    b"<\x00\x00\x00",
    b"\x00\x00<\x00",
    b"\x00<\x00\x00",
    b"\x4c\x6f\xa7\x94",
)
_ENCODING_ERRORS = frozenset(
    expat.errors.codes[e]
    for e in (expat.errors.XML_ERROR_UNKNOWN_ENCODING, expat.errors.XML_ERROR_INCORRECT_ENCODING)
)


def open_zip(
    data: bytes,
    *,
    allow_doctype: bool = False,
    encrypted: Callable[[zipfile.ZipFile], bool] | None = None,
) -> zipfile.ZipFile:
    """The archive, after checking its size, ratio, member count and every member's XML
    prologue (with defusedxml's parser).

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
        if not member.is_dir():
            _check_xml(archive, member, allow_doctype)
    return archive


def ole_error(data: bytes) -> ParseError:
    """An OLE compound file: an encrypted OOXML package, or a legacy binary Office file."""
    if "EncryptedPackage".encode("utf-16-le") in data or b"EncryptionInfo" in data:
        return ParseError("the file is password-protected", code="encrypted_document")
    return ParseError(
        "a legacy binary Office file (.doc, .xls, .ppt): save it as .docx, .xlsx or .pptx",
        code="unsupported_type",
    )


class _RootReached(Exception):
    """The root element started: the prologue, where a DTD must be, is behind the parser."""


class _StopAtRoot:
    """The parser's target: nothing is built; the first element ends the check."""

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        raise _RootReached

    def close(self) -> None:
        return None


def _check_xml(archive: zipfile.ZipFile, member: zipfile.ZipInfo, allow_doctype: bool) -> None:
    """``unsafe_xml`` for a member that declares a DTD (only entities with ``allow_doctype``)
    or is XML in an encoding the check cannot read; any other member passes (its own parser
    judges it)."""
    parser = DefusedXMLParser(
        target=_StopAtRoot(), forbid_dtd=not allow_doctype, forbid_entities=True, forbid_external=True
    )
    try:
        with archive.open(member) as part:
            head = part.read(_READ)
            if head.startswith(_FOREIGN_XML):
                raise ParseError("an XML part is in an encoding the check cannot read", code="unsafe_xml")
            while head:
                parser.feed(head)
                head = part.read(_READ)
            parser.close()
    except _RootReached:
        return
    except defusedxml.DefusedXmlException as exc:
        raise ParseError("an XML part declares a DTD or entities", code="unsafe_xml") from exc
    except XmlSyntaxError as exc:
        if exc.code in _ENCODING_ERRORS:
            raise ParseError(
                "an XML part is in an encoding the check cannot read", code="unsafe_xml"
            ) from exc
    except ValueError as exc:
        if "encoding" in str(exc):  # pyexpat: "multi-byte encodings are not supported"
            raise ParseError(
                "an XML part is in an encoding the check cannot read", code="unsafe_xml"
            ) from exc
        raise ParseError(
            f"an archive member is damaged ({type(exc).__name__})", code="corrupt_document"
        ) from exc
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ParseError(
            f"an archive member is damaged ({type(exc).__name__})", code="corrupt_document"
        ) from exc
