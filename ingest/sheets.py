"""Spreadsheets: XLSX with openpyxl, CSV with the standard library.

One section per sheet: the sheet name is a level-1 heading and the sheet's number its page,
so results say which sheet they came from. The first non-empty row is the header; rows are
grouped into Markdown tables that each repeat it (``table_blocks``), so every chunk of a
long sheet is self-describing. Formulas give the value Excel cached when it last saved the
file (``data_only``); a formula never calculated reads as empty.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterable
from typing import Any

from core.errors import ParseError
from core.records import ParsedDocument, SectionKind
from ingest.archive import open_zip
from ingest.decoding import decode_text
from ingest.limits import check_deadline
from ingest.text import Block, assemble, table_blocks

# 250k cells of text is ~2M characters, a few thousand chunks: more is a data dump, not a
# document, and would only fail later at too_many_chunks after minutes of parsing.
MAX_CELLS = 250_000
MAX_ROWS = 1_000_000  # rows scanned, empty ones included (a sparse sheet's gaps cost too)
_CSV_SNIFF_CHARS = 8192


def parse_xlsx(data: bytes) -> ParsedDocument:
    """Parse an XLSX workbook into one table section per sheet.

    Raises:
        ParseError: the container's codes (``encrypted_document``, ``zip_bomb``,
            ``unsafe_xml``, ``corrupt_document``), ``corrupt_document`` for a ZIP that is not a
            workbook, ``too_many_cells`` past ``MAX_CELLS`` or ``MAX_ROWS``.
    """
    open_zip(data).close()
    openpyxl = _import()
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except (KeyError, ValueError, TypeError) as exc:
        raise ParseError(f"not an Excel workbook ({type(exc).__name__})", code="corrupt_document") from exc
    try:
        counter = CellCounter()
        blocks: list[Block] = []
        for number, sheet in enumerate(book.worksheets, start=1):
            rows = counter.rows(sheet.iter_rows(values_only=True))
            tables = table_blocks(rows, page=number)
            if tables:
                blocks.append(Block(sheet.title, SectionKind.HEADING, level=1, page_start=number))
                blocks.extend(tables)
        title = " ".join((book.properties.title or "").split()) or None
        return assemble(blocks, title=title, page_count=len(book.worksheets))
    finally:
        book.close()


def parse_csv(data: bytes) -> ParsedDocument:
    """Parse CSV (delimiter sniffed: comma, semicolon, tab or pipe) into one table.

    Raises:
        ParseError: ``too_many_cells`` past ``MAX_CELLS`` or ``MAX_ROWS``.
    """
    text, warnings = decode_text(data)
    try:
        dialect: Any = csv.Sniffer().sniff(text[:_CSV_SNIFF_CHARS], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text), dialect)
    try:
        rows = CellCounter().rows(reader)
    except csv.Error as exc:
        raise ParseError(f"the CSV cannot be read: {exc}", code="corrupt_document") from exc
    return assemble(table_blocks(rows, page=1), page_count=1, warnings=warnings)


def _import() -> Any:
    try:
        import openpyxl
    except ImportError as exc:
        raise ParseError(
            "XLSX support needs openpyxl: pip install openpyxl", code="parser_unavailable"
        ) from exc
    return openpyxl


class CellCounter:
    """Cells and rows read so far, across the sheets of one workbook."""

    def __init__(self) -> None:
        self.cells = 0
        self.scanned = 0

    def rows(self, source: Iterable[Iterable[Any]]) -> list[list[str]]:
        rows: list[list[str]] = []
        for raw in source:
            self.scanned += 1
            if self.scanned % 1000 == 0:
                check_deadline()
            if self.scanned > MAX_ROWS:
                raise ParseError(f"more than {MAX_ROWS} rows", code="too_many_cells")
            row = [cell_text(value) for value in raw]
            while row and not row[-1]:
                row.pop()
            if not row:
                continue
            self.cells += sum(1 for cell in row if cell)
            if self.cells > MAX_CELLS:
                raise ParseError(f"more than {MAX_CELLS} non-empty cells", code="too_many_cells")
            rows.append(row)
        return rows


def cell_text(value: Any) -> str:
    """A cell's value as a table shows it: whole floats without ``.0``, midnight datetimes as
    dates, booleans as Excel writes them."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, dt.datetime) and value.time() == dt.time():
        return value.date().isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)
