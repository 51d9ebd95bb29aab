"""Ruled tables written as PDFs by three producers, for the PDF table tests and bench/pdf_tables.py.

Each producer puts text on the page its own way: PyMuPDF draws the rules and places each line
with ``insert_text`` (a base-14 Helvetica); ReportLab lays out a platypus ``Table`` of
``Paragraph`` cells (Type 1 Helvetica, WinAnsi text); fpdf2 lays out its ``table()`` with an
embedded TrueType subset (DejaVu Sans, Identity-H text with a ToUnicode map). Cells too wide
for their column wrap onto more lines in all three.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any
from xml.sax.saxutils import escape

Rows = Sequence[Sequence[str]]

DEJAVU = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
DEJAVU_BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
FONT_SIZE = 9.0
LEADING = 11.0
PADDING = 4.0
PAGE_WIDTH, PAGE_HEIGHT = 595.0, 842.0  # A4 in points
MARGIN = 50.0

# The cells (issue 44): multi-word names, thousands separators, decimals, parentheses,
# and a cell long enough to wrap in every producer.
WAREHOUSES: tuple[tuple[str, ...], ...] = (
    ("Site", "Capacity (pallets)", "Manager", "Annual cost (EUR)"),
    ("Rotterdam North", "18,450", "Marta Quintero", "1,234,567.89"),
    ("Lyon Saint-Exupéry", "9,020", "Jean-Paul Ferrand", "987.10"),
    ("Bilbao (port annex)", "12,300", "Ana María López de Arriba y Gómez Sánchez", "(2,500.00)"),
    ("São Paulo", "1,204,775", "Li Wei", "0.75"),
)


def _numeric(text: str) -> bool:
    return any(ch.isdigit() for ch in text) and not any(ch.isalpha() for ch in text)


def pymupdf_table(rows: Rows, *, title: str = "Warehouses") -> bytes:
    """Rules drawn as rectangles, each cell's lines placed with ``insert_text`` (numbers right-aligned)."""
    import pymupdf

    width = (PAGE_WIDTH - 2 * MARGIN) / max(len(row) for row in rows)
    # Font.text_length, not get_text_length: the latter counts no width for non-ASCII letters.
    font = pymupdf.Font("helv")
    doc = pymupdf.open()
    page = doc.new_page(width=PAGE_WIDTH, height=PAGE_HEIGHT)
    page.insert_text((MARGIN, MARGIN), title, fontsize=14, fontname="hebo")
    y = MARGIN + 20
    for row in rows:
        wrapped = [_wrap(cell, width - 2 * PADDING, font) for cell in row]
        height = max(len(lines) for lines in wrapped) * LEADING + 2 * PADDING
        for c, lines in enumerate(wrapped):
            x = MARGIN + c * width
            page.draw_rect(pymupdf.Rect(x, y, x + width, y + height), color=(0, 0, 0), width=0.6)
            for n, line in enumerate(lines):
                shift = width - 2 * PADDING - font.text_length(line, fontsize=FONT_SIZE)
                left = x + PADDING + (shift if _numeric(row[c]) else 0)
                page.insert_text((left, y + PADDING + FONT_SIZE + n * LEADING), line, fontsize=FONT_SIZE)
        y += height
    return doc.tobytes()


def _wrap(text: str, width: float, font: Any) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        candidate = f"{lines[-1]} {word}" if lines else word
        if lines and font.text_length(candidate, fontsize=FONT_SIZE) <= width:
            lines[-1] = candidate
        else:
            lines.append(word)
    return lines or [""]


def reportlab_table(rows: Rows, *, title: str = "Warehouses") -> bytes:
    """A platypus ``Table`` of ``Paragraph`` cells with a grid (numbers right-aligned)."""
    from reportlab.lib import colors
    from reportlab.lib.enums import TA_RIGHT
    from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Table, TableStyle

    styles = getSampleStyleSheet()
    body = ParagraphStyle("cell", parent=styles["BodyText"], fontSize=FONT_SIZE, leading=LEADING)
    number = ParagraphStyle("number", parent=body, alignment=TA_RIGHT)
    data = [[Paragraph(escape(cell), number if _numeric(cell) else body) for cell in row] for row in rows]
    columns = max(len(row) for row in rows)
    table = Table(data, colWidths=[(PAGE_WIDTH - 2 * MARGIN) / columns] * columns)
    table.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.black)]))
    out = io.BytesIO()
    template = SimpleDocTemplate(
        out, pagesize=(PAGE_WIDTH, PAGE_HEIGHT), leftMargin=MARGIN, rightMargin=MARGIN, topMargin=MARGIN
    )
    template.build([Paragraph(escape(title), styles["Heading1"]), table])
    return out.getvalue()


def fpdf2_table(rows: Rows, *, title: str = "Warehouses") -> bytes:
    """fpdf2's ``table()`` in an embedded TrueType font (DejaVu Sans), header row bold."""
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format=(PAGE_WIDTH, PAGE_HEIGHT))
    pdf.set_margin(MARGIN)
    pdf.add_page()
    pdf.add_font("dejavu", "", DEJAVU)
    pdf.add_font("dejavu", "B", DEJAVU_BOLD)
    pdf.set_font("dejavu", "B", 14)
    pdf.cell(text=title)
    pdf.ln(24)
    pdf.set_font("dejavu", size=FONT_SIZE)
    with pdf.table(line_height=LEADING, padding=PADDING) as table:
        for values in rows:
            row = table.row()
            for cell in values:
                row.cell(cell, align="RIGHT" if _numeric(cell) else "LEFT")
    return bytes(pdf.output())


PRODUCERS: dict[str, Callable[..., bytes]] = {
    "pymupdf": pymupdf_table,
    "reportlab": reportlab_table,
    "fpdf2": fpdf2_table,
}
