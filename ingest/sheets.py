"""Spreadsheets: XLSX with openpyxl, CSV with the standard library.

One section per sheet: the sheet name is a level-1 heading and the sheet's number its page,
so results say which sheet they came from. The first non-empty row is the header; rows are
grouped into Markdown tables that each repeat it (``table_blocks``), so every chunk of a
long sheet is self-describing. Formulas give the value Excel cached when it last saved the
file (``data_only``). A formula never calculated (a file written by a library such as
openpyxl, not saved by a spreadsheet application) has no such value: it reads as its formula
text (``=SUM(B2:B9)``), which says the cell is computed and from what (an empty cell would
say it holds nothing), and the document gets a ``formulas_without_values`` warning naming
how many and on which sheets. openpyxl gives a cell its cached value or its formula, never
both, so a workbook that has formula elements at all is read twice, in step (values, then
formulas); one without (a data export) is read once.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
import zipfile
from collections.abc import Iterable, Iterator
from itertools import zip_longest
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
# A formula element in any part, whatever its prefix (``<f>``, ``<x:f t="shared"/>``); a
# chart's ``<c:f>`` matches too, which costs only the second read.
_FORMULA_ELEMENT = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?f[\s/>]")
_SCAN = 1024 * 1024
_NAMED_SHEETS = 10  # in the warning; the rest are counted


def parse_xlsx(data: bytes) -> ParsedDocument:
    """Parse an XLSX workbook into one table section per sheet.

    Raises:
        ParseError: the container's codes (``encrypted_document``, ``zip_bomb``,
            ``unsafe_xml``, ``corrupt_document``), ``corrupt_document`` for a ZIP that is not a
            workbook, ``too_many_cells`` past ``MAX_CELLS`` or ``MAX_ROWS``.
    """
    with open_zip(data) as archive:
        formulas = _has_formulas(archive)
    openpyxl = _import()
    book = _load(openpyxl, data, data_only=True)
    formula_book = None
    try:
        if formulas:
            formula_book = _load(openpyxl, data, data_only=False)
        counter = CellCounter()
        uncached = UncachedFormulas()
        blocks: list[Block] = []
        for number, sheet in enumerate(book.worksheets, start=1):
            values: Iterable[Iterable[Any]] = sheet.iter_rows(values_only=True)
            if formula_book is not None:
                formula_rows = formula_book.worksheets[number - 1].iter_rows(values_only=True)
                values = uncached.fill(sheet.title, values, formula_rows)
            tables = table_blocks(counter.rows(values), page=number)
            if tables:
                blocks.append(Block(sheet.title, SectionKind.HEADING, level=1, page_start=number))
                blocks.extend(tables)
        title = " ".join((book.properties.title or "").split()) or None
        return assemble(blocks, title=title, page_count=len(book.worksheets), warnings=uncached.warnings())
    finally:
        book.close()
        if formula_book is not None:
            formula_book.close()


def _load(openpyxl: Any, data: bytes, *, data_only: bool) -> Any:
    try:
        return openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=data_only)
    except (KeyError, ValueError, TypeError) as exc:
        raise ParseError(f"not an Excel workbook ({type(exc).__name__})", code="corrupt_document") from exc


def _has_formulas(archive: zipfile.ZipFile) -> bool:
    """Whether any part holds a formula element (read in slices: no part is held whole)."""
    for member in archive.infolist():
        with archive.open(member) as part:
            tail = b""
            while block := part.read(_SCAN):
                check_deadline()
                if _FORMULA_ELEMENT.search(tail + block):
                    return True
                tail = block[-64:]
    return False


class UncachedFormulas:
    """Formula cells with no cached value, by sheet: each reads as its formula text."""

    def __init__(self) -> None:
        self.by_sheet: dict[str, int] = {}

    def fill(
        self, sheet: str, values: Iterable[Iterable[Any]], formulas: Iterable[Iterable[Any]]
    ) -> Iterator[tuple[Any, ...]]:
        """``values``' rows, a formula's text where its cell has no value (``formulas``: the
        same sheet read with formulas, row for row)."""
        for row, formula_row in zip_longest(values, formulas, fillvalue=()):
            yield tuple(self._cell(sheet, v, f) for v, f in zip_longest(row, formula_row))

    def _cell(self, sheet: str, value: Any, formula: Any) -> Any:
        # openpyxl gives a formula as "=..." (an array formula as an object holding it in .text).
        text = formula if isinstance(formula, str) else getattr(formula, "text", None)
        if value is not None or not isinstance(text, str) or not text.startswith("="):
            return value
        return self.formula(sheet, text)

    def formula(self, sheet: str, text: str) -> str:
        """Count a formula cell with no value on ``sheet``; returns the text it reads as."""
        self.by_sheet[sheet] = self.by_sheet.get(sheet, 0) + 1
        return text

    def warnings(self) -> tuple[str, ...]:
        """``formulas_without_values: N (Sheet: n, ...)``, or none."""
        if not self.by_sheet:
            return ()
        named = list(self.by_sheet.items())[:_NAMED_SHEETS]
        listed = ", ".join(f"{name[:100]}: {count}" for name, count in named)
        more = len(self.by_sheet) - len(named)
        listed += f", {more} more sheets" if more else ""
        return (f"formulas_without_values: {sum(self.by_sheet.values())} ({listed})",)


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
