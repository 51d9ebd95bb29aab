"""ODS (OpenDocument spreadsheet) parsing: one table section per sheet, as XLSX is read.

The sheet name is a level-1 heading and the sheet's number its page; the first non-empty
row is the header, repeated in every group of rows (``table_blocks``), so each chunk of a
long sheet is self-describing. A cell reads as its typed value, the one a formula's last
calculation cached (``office:value``, ``office:date-value``, ...), not its display string
(``64`` rather than ``64.00 €``), as XLSX cells give openpyxl's cached values; a cell with
no typed value (text) reads as its paragraphs. A formula no application calculated (no
value, no text: a file written by a library) reads as its formula, ``=SUM([.B2:.B3])``, and
is counted in the ``formulas_without_values`` warning, as XLSX's are (``UncachedFormulas``).

``content.xml`` is streamed (``iter_part``): each row is read, counted against the same
caps as XLSX (``CellCounter``: ``too_many_cells``) and dropped, so a sheet of a million
cells, written out or as one row ``number-rows-repeated`` a million times, stops at the cap
without its tree ever being built.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator

from core.errors import ParseError
from core.records import ParsedDocument, SectionKind
from ingest.opendocument import (
    ROW,
    TABLE,
    Notes,
    inline_text,
    iter_part,
    meta_title,
    open_package,
    q,
    repeated_row,
)
from ingest.sheets import CellCounter, UncachedFormulas, cell_text
from ingest.text import Block, assemble, table_blocks

_SPREADSHEET = q("office", "spreadsheet")
_TYPE = q("office", "value-type")
_NUMBER = q("office", "value")
_DATE, _TIME, _BOOLEAN = q("office", "date-value"), q("office", "time-value"), q("office", "boolean-value")
_STRING = q("office", "string-value")
_FORMULA = q("table", "formula")
_NAMESPACE = re.compile(r"^[A-Za-z][\w.-]*:(?==)")  # "of:=SUM(...)": the formula's grammar
_DURATION = re.compile(r"^PT(\d+)H(\d+)M(\d+)(?:\.\d+)?S$")


def parse(data: bytes) -> ParsedDocument:
    """Parse an ODS workbook into one table section per sheet.

    Raises:
        ParseError: the container's codes (``encrypted_document``, ``zip_bomb``,
            ``unsafe_xml``, ``corrupt_document``), ``corrupt_document`` for a package with no
            spreadsheet body, ``too_many_cells`` past XLSX's ``MAX_CELLS`` or ``MAX_ROWS``.
    """
    with open_package(data) as archive:
        title = meta_title(archive)
        sheets = _Sheets(iter_part(archive, "content.xml"))
        counter = CellCounter()
        blocks: list[Block] = []
        number = 0
        for name, rows in sheets:
            number += 1
            tables = table_blocks(counter.rows(rows), page=number)
            if tables:
                blocks.append(
                    Block(name or f"Sheet {number}", SectionKind.HEADING, level=1, page_start=number)
                )
                blocks.extend(tables)
    if not sheets.spreadsheet:
        raise ParseError("content.xml has no office:spreadsheet body", code="corrupt_document")
    warnings = sheets.notes.warnings() + sheets.uncached.warnings()
    return assemble(blocks, title=title, page_count=number, warnings=warnings)


class _Sheets:
    """The sheets of a streamed ``content.xml``: ``(name, rows)`` per top-level table, the
    rows drawn from the same event stream (read each sheet's rows before the next sheet)."""

    def __init__(self, events: Iterator[tuple[str, ET.Element]]) -> None:
        self.events = events
        self.spreadsheet = False
        self.notes = Notes()
        self.uncached = UncachedFormulas()
        self.sheet = ""

    def __iter__(self) -> Iterator[tuple[str, Iterator[list[str]]]]:
        for event, element in self.events:
            if event != "start":
                continue
            if element.tag == _SPREADSHEET:
                self.spreadsheet = True
            elif element.tag == TABLE and self.spreadsheet:
                self.sheet = " ".join(element.get(q("table", "name"), "").split())
                yield self.sheet, self._rows(element)

    def _rows(self, sheet: ET.Element) -> Iterator[list[str]]:
        depth = 0  # tables nested in a cell: their rows are that cell's text
        for event, element in self.events:
            if element.tag == TABLE:
                if event == "end" and depth == 0:
                    return
                depth += 1 if event == "start" else -1
            elif event == "end" and element.tag == ROW and depth == 0:
                yield from repeated_row(element, self._value)
                element.clear()
                sheet.clear()  # drops the rows read so far; the tree never holds the sheet

    def _value(self, cell: ET.Element) -> str:
        value = cell_value(cell, self.notes)
        formula = cell.get(_FORMULA)
        if value or not formula:
            return value
        return self.uncached.formula(self.sheet or "Sheet", _NAMESPACE.sub("", formula))


def cell_value(cell: ET.Element, notes: Notes) -> str:
    """A cell's cached typed value as XLSX cells read (``cell_text``), else its text."""
    kind = cell.get(_TYPE)
    if kind in ("float", "percentage", "currency"):
        try:
            return cell_text(float(cell.get(_NUMBER, "")))
        except ValueError:
            pass
    elif kind == "date" and cell.get(_DATE):
        return cell.get(_DATE, "").removesuffix("T00:00:00")
    elif kind == "time":
        match = _DURATION.match(cell.get(_TIME, ""))
        if match:
            hours, minutes, seconds = (int(part) for part in match.groups())
            return f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    elif kind == "boolean" and cell.get(_BOOLEAN) in ("true", "false"):
        return cell.get(_BOOLEAN, "").upper()
    elif kind == "string" and cell.get(_STRING) is not None:
        return cell.get(_STRING, "")
    return inline_text(cell, notes)
