"""Ruled tables on a PDF page: PyMuPDF's table finder draws the grid, the text layer fills it.

``Table.extract()`` rebuilds each cell's words from glyph-tight character boxes with
pdfplumber's tolerance clustering, a different path from the page's text layer, and it
mangles what a table is read for: a comma or a full stop sits lower than the digits around it
and is clustered onto a "line" of its own ("18,450" becomes "18450 ,"), and the gap of a
space is under the 3-point word tolerance ("Marta Quintero" becomes "MartaQuintero"). So the
finder is used for the cell boxes only, and each cell's text is the text layer's characters
whose centre lies in the box: MuPDF's own lines and its space characters, what the page
shows. (``pymupdf.table.extract_cells`` does the same per cell, but re-reads the whole page
for every cell: 2 s for a page of 240 cells, where one read here costs ~0.01 s.)
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_Box = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class PageTable:
    """A table found on a page: its box, and its rows of cell text (``""`` for a spanned slot)."""

    bbox: _Box
    rows: tuple[tuple[str, ...], ...]


def find_tables(page: Any, text_flags: int) -> list[PageTable]:
    """The ruled tables of a PyMuPDF page with their cell text.

    Args:
        page: A ``pymupdf.Page``.
        text_flags: The text extraction flags of the page's text layer.

    Returns:
        Tables of two rows or more, two columns or more, and some text.
    """
    try:
        # PyMuPDF 2 gates tables by an ONNX layout model (~1 s a page); the line
        # finder alone is what we want.
        found = page.find_tables(use_layout=False)
    except TypeError:
        found = page.find_tables()
    if not found.tables:
        return []
    # Sorted as the page's text layer is (ingest/pdf.py), so a wrapped cell's lines run top down.
    blocks = page.get_text("rawdict", sort=True, flags=text_flags)["blocks"]
    tables = []
    for table in found.tables:
        bbox = tuple(table.bbox)
        rows = cell_texts([row.cells for row in table.rows], _lines_in(blocks, bbox))
        if len(rows) >= 2 and max(len(row) for row in rows) >= 2 and any(any(row) for row in rows):
            tables.append(PageTable(bbox=bbox, rows=rows))
    return tables


def cell_texts(
    grid: Sequence[Sequence[_Box | None]], lines: Sequence[dict[str, Any]]
) -> tuple[tuple[str, ...], ...]:
    """Each cell's text: the characters of ``lines`` whose centre lies in the cell's box.

    Args:
        grid: Rows of cell boxes ``(x0, y0, x1, y1)`` top to bottom, each left to right;
            ``None`` where a spanning cell covers the slot.
        lines: Text lines as PyMuPDF's ``rawdict`` gives them (spans of characters).

    Returns:
        The rows of cell text, whitespace collapsed; a cell's lines (a wrapped cell) are
        joined by a space.
    """
    boxes = [[cell for cell in row if cell is not None] for row in grid]
    tops = [min(cell[1] for cell in row) for row in boxes]
    reach = list(itertools.accumulate((max(cell[3] for cell in row) for row in boxes), max))
    pieces: list[list[list[str]]] = [[[] for _ in row] for row in grid]
    for line in lines:
        in_line: dict[tuple[int, int], list[str]] = {}
        for span in line["spans"]:
            for char in span["chars"]:
                x0, y0, x1, y1 = char["bbox"]
                slot = _slot(grid, tops, reach, (x0 + x1) / 2, (y0 + y1) / 2)
                if slot is not None:
                    in_line.setdefault(slot, []).append(char["c"])
        for (r, c), chars in in_line.items():
            pieces[r][c].append("".join(chars))
    return tuple(tuple(" ".join(" ".join(cell).split()) for cell in row) for row in pieces)


def _slot(
    grid: Sequence[Sequence[_Box | None]], tops: list[float], reach: list[float], x: float, y: float
) -> tuple[int, int] | None:
    """The (row, column) of the cell holding the point, if one does.

    Rows are sorted by their top, so the search starts at the last row starting above the
    point and goes up only while a cell of the rows above reaches down to it (a cell that
    spans rows is listed in its first row).
    """
    r = bisect.bisect_right(tops, y) - 1
    while r >= 0 and reach[r] > y:
        for c, cell in enumerate(grid[r]):
            if cell is not None and cell[0] <= x < cell[2] and cell[1] <= y < cell[3]:
                return r, c
        r -= 1
    return None


def _lines_in(blocks: list[dict[str, Any]], bbox: _Box) -> list[dict[str, Any]]:
    return [
        line
        for block in blocks
        if block.get("type") == 0 and _overlaps(block["bbox"], bbox)
        for line in block["lines"]
        if _overlaps(line["bbox"], bbox)
    ]


def _overlaps(a: Sequence[float], b: Sequence[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
