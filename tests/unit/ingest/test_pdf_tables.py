"""PDF table cells read as the page shows them, whichever library wrote the PDF (issue 44).

The tables hold the issue's cells ("18,450", "Marta Quintero", "Capacity (pallets)"),
decimals, parentheses and a cell that wraps, written by PyMuPDF, ReportLab and fpdf2
(testkit/table_pdfs.py); bench/pdf_tables.py measures the same on many tables.
"""

from __future__ import annotations

import numpy as np
import pymupdf
import pytest

from core.records import ParsedDocument, SectionKind
from index.bm25_shards import LexicalShard
from index.tokenize import Tokenizer
from ingest import pdf
from ingest.chunking import chunk_document
from ingest.pdf_tables import cell_texts
from ingest.text import markdown_table
from testkit.table_pdfs import PRODUCERS, WAREHOUSES

WRAPPED = "Ana María López de Arriba y Gómez Sánchez"


@pytest.fixture(scope="module", params=sorted(PRODUCERS))
def table_pdf(request: pytest.FixtureRequest) -> tuple[bytes, ParsedDocument]:
    data = PRODUCERS[request.param](WAREHOUSES)
    return data, pdf.parse(data)


def test_cells_are_the_text_the_page_shows(table_pdf: tuple[bytes, ParsedDocument]) -> None:
    data, parsed = table_pdf
    # The test's premise: the long cell wraps onto two lines on the page.
    page_text = pymupdf.open(stream=data)[0].get_text()
    assert WRAPPED not in page_text and "18,450" in page_text
    tables = [section for section in parsed.sections if section.kind is SectionKind.TABLE]
    assert len(tables) == 1
    assert tables[0].text == markdown_table([list(row) for row in WAREHOUSES])
    # Nothing of the table leaks into the text around it, nothing is read twice.
    assert parsed.text.count("Marta Quintero") == 1


def test_a_fact_only_in_a_cell_is_found(table_pdf: tuple[bytes, ParsedDocument]) -> None:
    _, parsed = table_pdf
    others = [
        "Marta runs the night shift at the Lyon depot; the pallets there are counted weekly.",
        "Capacity planning for 2027 starts in March, with the annual cost reviewed per site.",
    ]
    chunks = chunk_document(
        parsed, tenant_id="t", external_id="warehouses", version=1, count_tokens=lambda text: len(text) // 3
    )
    texts = [chunk.text for chunk in chunks if chunk.level == 0] + others
    shard = LexicalShard.build(texts, np.arange(len(texts)), Tokenizer())
    for query, cell in (("Marta Quintero", "| Marta Quintero |"), ("18,450 pallets", "| 18,450 |")):
        _, positions = shard.search(query, 1, allowed=None)
        assert len(positions) == 1 and cell in texts[int(positions[0])], query


def test_a_cell_spanning_rows_keeps_its_lower_lines() -> None:
    # Row 0: A and B, where B spans both rows; row 1: C and the slot B covers.
    grid: list[list[tuple[float, float, float, float] | None]] = [
        [(0.0, 0.0, 50.0, 20.0), (50.0, 0.0, 100.0, 40.0)],
        [(0.0, 20.0, 50.0, 40.0), None],
    ]

    def line(text: str, x: float, y: float) -> dict[str, object]:
        chars = [{"c": ch, "bbox": (x + 5 * i, y, x + 5 * i + 5, y + 8)} for i, ch in enumerate(text)]
        return {"spans": [{"chars": chars}]}

    lines = [line("A 1", 2, 4), line("top", 52, 4), line("C 2", 2, 24), line("bottom", 52, 24)]
    assert cell_texts(grid, lines) == (("A 1", "top bottom"), ("C 2", ""))
