"""OpenDocument packages (ODT, ODP, ODS): the checks before any part is read, the parts as
element trees, and the text of paragraphs and table rows the three parsers share.

The parts are read with the standard library's ElementTree through defusedxml, not odfpy:
odfpy builds its own object per node for every part of the package (styles and settings
included) before anything can be counted, and hands back no line a cap could stop at;
defusedxml is already what keeps openpyxl's XML parsing safe, and ``iterparse`` lets a
spreadsheet be read row by row, each row dropped once counted, so the cell cap stops a 1M-cell
sheet before its tree is built. A part with entities is refused with ``unsafe_xml`` twice
over: by the container's check of every member (``ingest/archive.py``, defusedxml up to the
root element) and here by defusedxml again (entities, external references), over the whole part.

A password-protected ODF file is a normal ZIP whose parts are encrypted one by one, said in
``META-INF/manifest.xml`` (``manifest:encryption-data``): it is ``encrypted_document``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import defusedxml
import defusedxml.ElementTree as SafeET

from core.errors import ParseError
from ingest.archive import open_zip

NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
    "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
    "svg": "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0",
    "manifest": "urn:oasis:names:tc:opendocument:xmlns:manifest:1.0",
    "dc": "http://purl.org/dc/elements/1.1/",
}
ODT = "application/vnd.oasis.opendocument.text"
ODP = "application/vnd.oasis.opendocument.presentation"
ODS = "application/vnd.oasis.opendocument.spreadsheet"
MANIFEST = "META-INF/manifest.xml"
_MAX_SMALL_PART = 8 * 1024 * 1024  # manifest.xml, meta.xml: kilobytes in real files
MAX_COLUMNS = 16_384  # LibreOffice's own limit; trailing empty cells repeat up to it
MAX_DEPTH = 100  # elements nested in a paragraph or cell (spans, frames, lists)
_SPACE = re.compile(r"[ \t\r\n]+")


def q(prefix: str, local: str) -> str:
    """The ElementTree name of ``prefix:local`` (``q("text", "p")``)."""
    return f"{{{NS[prefix]}}}{local}"


P, H = q("text", "p"), q("text", "h")
LIST, LIST_ITEM, LIST_HEADER = q("text", "list"), q("text", "list-item"), q("text", "list-header")
TABLE, ROW = q("table", "table"), q("table", "table-row")
CELL, COVERED = q("table", "table-cell"), q("table", "covered-table-cell")
ANNOTATION = q("office", "annotation")
# Inside a paragraph: comments (talk about the text), foot/endnotes (DOCX drops their bodies
# too), and ruby annotations' reading aids.
_DROPPED_INLINE = frozenset(
    {ANNOTATION, q("office", "annotation-end"), q("text", "note"), q("text", "ruby-text")}
)
_ROW_GROUPS = frozenset(
    {q("table", "table-header-rows"), q("table", "table-rows"), q("table", "table-row-group")}
)
_SPACES, _TAB, _BREAK = q("text", "s"), q("text", "tab"), q("text", "line-break")
_REPEAT_COLUMNS, _REPEAT_ROWS = q("table", "number-columns-repeated"), q("table", "number-rows-repeated")


def open_package(data: bytes) -> zipfile.ZipFile:
    """The package after the container checks (``open_zip``) and the manifest's encryption.

    A ``<!DOCTYPE`` without entities is allowed: OpenOffice 2 and 3 wrote one into
    ``manifest.xml``; entity declarations are refused as in every other ZIP format.

    Raises:
        ParseError: ``encrypted_document``, ``zip_bomb``, ``unsafe_xml``, ``corrupt_document``.
    """
    return open_zip(data, allow_doctype=True, encrypted=_encrypted)


def _encrypted(archive: zipfile.ZipFile) -> bool:
    if MANIFEST not in archive.namelist():
        return False
    manifest = parse_part(archive, MANIFEST, limit=_MAX_SMALL_PART)
    return manifest.find(f".//{q('manifest', 'encryption-data')}") is not None


def parse_part(archive: zipfile.ZipFile, name: str, *, limit: int | None = None) -> ET.Element:
    """A part as an element tree.

    Raises:
        ParseError: ``corrupt_document`` for a missing, damaged, oversized (past ``limit``)
            or malformed part; ``unsafe_xml`` for one declaring a DTD's entities.
    """
    with _xml_errors(name):
        info = archive.getinfo(name)
        if limit is not None and info.file_size > limit:
            raise ParseError(f"{name} is {info.file_size} bytes", code="corrupt_document")
        return SafeET.fromstring(archive.read(info))


def iter_part(archive: zipfile.ZipFile, name: str) -> Iterator[tuple[str, ET.Element]]:
    """``(event, element)`` for the start and end of every element of a part, streamed."""
    with _xml_errors(name), archive.open(name) as stream:
        yield from SafeET.iterparse(stream, events=("start", "end"))


@contextmanager
def _xml_errors(name: str) -> Iterator[None]:
    """What reading a part can raise, as the reason codes of the container's checks."""
    try:
        yield
    except defusedxml.DefusedXmlException as exc:
        raise ParseError(f"{name} declares a DTD or entities", code="unsafe_xml") from exc
    except (ET.ParseError, KeyError, zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
        raise ParseError(
            f"{name} is missing or unreadable ({type(exc).__name__})", code="corrupt_document"
        ) from exc


def meta_title(archive: zipfile.ZipFile) -> str | None:
    """The Dublin Core title of ``meta.xml``, if the package has one."""
    if "meta.xml" not in archive.namelist():
        return None
    title = parse_part(archive, "meta.xml", limit=_MAX_SMALL_PART).find(f".//{q('dc', 'title')}")
    text = " ".join("".join(title.itertext()).split()) if title is not None else ""
    return text or None


def body(root: ET.Element, kind: str) -> ET.Element:
    """``office:body/office:<kind>`` of a content part.

    Raises:
        ParseError: ``corrupt_document`` when the package holds no such body (an ODS sent
            as an ODT).
    """
    found = root.find(f"{q('office', 'body')}/{q('office', kind)}")
    if found is None:
        raise ParseError(f"content.xml has no office:{kind} body", code="corrupt_document")
    return found


class Notes:
    """What the text of a document left out on purpose, for its warnings."""

    def __init__(self) -> None:
        self.comments = 0

    def warnings(self) -> tuple[str, ...]:
        return (f"comments_dropped: {self.comments}",) if self.comments else ()


def inline_text(element: ET.Element, notes: Notes) -> str:
    """The text of a paragraph, heading or cell as a reader sees it.

    XML whitespace collapses to one space (ODF's rule); ``text:s``, ``text:tab`` and
    ``text:line-break`` are the spaces, tabs and breaks the author typed. Paragraphs nested
    inside (a text box in a paragraph, a cell's several paragraphs) are separated by a space.
    Comments and notes are left out, the text after them kept.

    Raises:
        ParseError: ``corrupt_document`` past ``MAX_DEPTH`` nested elements.
    """
    parts: list[str] = []
    _collect(element, parts, notes, 0)
    return "".join(parts).strip()


def _collect(element: ET.Element, parts: list[str], notes: Notes, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ParseError(f"elements nested more than {MAX_DEPTH} deep", code="corrupt_document")
    if element.text:
        parts.append(_SPACE.sub(" ", element.text))
    for child in element:
        tag = child.tag
        if tag in _DROPPED_INLINE:
            if tag == ANNOTATION:
                notes.comments += 1
        elif tag == _SPACES:
            parts.append(" " * min(_count(child.get(q("text", "c"))), 1000))
        elif tag == _TAB:
            parts.append("\t")
        elif tag == _BREAK:
            parts.append("\n")
        else:
            block = tag in (P, H)
            if block and parts:
                parts.append(" ")
            _collect(child, parts, notes, depth + 1)
            if block:
                parts.append(" ")
        if child.tail:
            parts.append(_SPACE.sub(" ", child.tail))


def _count(value: str | None) -> int:
    try:
        return max(int(value or "1"), 1)
    except ValueError:
        return 1


def table_rows(
    table: ET.Element, cell_value: Callable[[ET.Element], str], depth: int = 0
) -> Iterator[list[str]]:
    """The rows of a ``table:table`` (header rows and row groups in place), repeats expanded
    (see ``row_cells``); nested tables are read as their cells' text, not as rows."""
    if depth > MAX_DEPTH:
        raise ParseError(f"row groups nested more than {MAX_DEPTH} deep", code="corrupt_document")
    for child in table:
        if child.tag == ROW:
            yield from repeated_row(child, cell_value)
        elif child.tag in _ROW_GROUPS:
            yield from table_rows(child, cell_value, depth + 1)


def repeated_row(row: ET.Element, cell_value: Callable[[ET.Element], str]) -> Iterator[list[str]]:
    """A row as many times as ``number-rows-repeated`` says, unless it is empty: a saved
    sheet ends in one empty row repeated to the millionth, which is read once. The caller's
    cell cap (``CellCounter``) stops a non-empty row repeated past it."""
    cells = row_cells(row, cell_value)
    repeats = _count(row.get(_REPEAT_ROWS)) if cells else 1
    for _ in range(repeats):
        yield cells


def row_cells(row: ET.Element, cell_value: Callable[[ET.Element], str]) -> list[str]:
    """A row's cells, ``number-columns-repeated`` expanded; trailing empty cells dropped, so
    the 16,384-column empty tail a saved row carries costs nothing. A merged cell's covered
    cells read as empty, as DOCX's merged cells are read once.

    Raises:
        ParseError: ``too_many_cells`` for a non-empty cell past column ``MAX_COLUMNS``.
    """
    cells: list[str] = []
    width = 0  # columns so far, the trailing empty ones included
    for cell in row:
        if cell.tag not in (CELL, COVERED):
            continue
        value = cell_value(cell) if cell.tag == CELL else ""
        repeats = _count(cell.get(_REPEAT_COLUMNS))
        if value:
            if width + repeats > MAX_COLUMNS:
                raise ParseError(f"a row has more than {MAX_COLUMNS} columns", code="too_many_cells")
            cells.extend([""] * (width - len(cells)))
            cells.extend([value] * repeats)
        width += repeats
    return cells
