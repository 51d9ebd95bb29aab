"""DOCX, PPTX, XLSX and CSV parsing on files the writer libraries build in the test."""

from __future__ import annotations

import pytest

from core.errors import ParseError
from core.records import ParsedDocument, SectionKind, SourceDocument
from ingest import docx, pptx, sheets
from ingest.chunking import chunk_document
from ingest.parse import CSV, DOCX, PPTX, XLSX, parse_document, sniff_mime
from tests import hostile_office
from tests.unit.ingest import office_factory


def _offsets_exact(parsed: ParsedDocument) -> None:
    for section in parsed.sections:
        assert parsed.text[section.char_start : section.char_end] == section.text


def _doc(content: bytes, mime: str) -> SourceDocument:
    return SourceDocument(tenant_id="t", external_id="e", mime_type=mime, content=content)


def test_docx_headings_lists_tables_and_title() -> None:
    parsed = docx.parse(office_factory.docx_bytes(rows=3))
    _offsets_exact(parsed)
    assert parsed.title == "Operations handbook"
    by_text = {s.text: s for s in parsed.sections}
    assert by_text[office_factory.FACTS["rotation"]].heading_path == ("Security",)
    assert by_text[office_factory.FACTS["backups"]].heading_path == ("Storage", "Backups")
    assert by_text["- Report lost laptops at once"].kind is SectionKind.LIST
    (table,) = [s for s in parsed.sections if s.kind is SectionKind.TABLE]
    assert table.text.splitlines()[:3] == [
        "| Server | Region | Owner |",
        "|---|---|---|",
        "| srv-0000 | region-0 | team 0 |",
    ]
    assert table.heading_path == ("Storage", "Backups")
    # Page headers are dropped like a PDF's running headers.
    assert "INTERNAL HEADER" not in parsed.text


def test_docx_comments_dropped_and_tracked_changes_read_as_accepted() -> None:
    parsed = docx.parse(office_factory.docx_bytes(comment=True, tracked=True))
    assert "reviewer remark" not in parsed.text
    assert "comments_dropped: 1" in parsed.warnings
    assert "Budget status: approved" in parsed.text
    assert "rejected" not in parsed.text


def test_long_docx_table_repeats_its_header_in_every_group() -> None:
    parsed = docx.parse(office_factory.docx_bytes(rows=200))
    tables = [s for s in parsed.sections if s.kind is SectionKind.TABLE]
    assert len(tables) > 5
    assert all(t.text.startswith("| Server | Region | Owner |\n|---|---|---|\n") for t in tables)
    rows = [line for t in tables for line in t.text.splitlines()[2:]]
    assert rows == [f"| srv-{i:04d} | region-{i % 7} | team {i} |" for i in range(200)]


def test_pptx_one_section_per_slide_with_notes_and_tables() -> None:
    parsed = pptx.parse(office_factory.pptx_bytes(slides=3))
    _offsets_exact(parsed)
    assert parsed.page_count == 3 and parsed.title == "Key rotation"
    headings = [(s.text, s.page_start) for s in parsed.sections if s.kind is SectionKind.HEADING]
    assert headings == [("Key rotation", 1), ("Slide title 2", 2), ("Slide 3", 3)]
    body = next(s for s in parsed.sections if office_factory.FACTS["rotation"] in s.text)
    assert body.heading_path == ("Key rotation",) and body.page_start == 1
    assert "  - Old keys are retired after a day" in body.text
    notes = [s for s in parsed.sections if s.text.startswith("Notes: ")]
    assert [(n.text, n.page_start) for n in notes] == [
        ("Notes: Speaker notes for slide 1", 1),
        ("Notes: Speaker notes for slide 2", 2),
    ]
    (table,) = [s for s in parsed.sections if s.kind is SectionKind.TABLE]
    assert table.page_start == 2 and "| uptime | 99.9 |" in table.text


def test_xlsx_one_section_per_sheet_with_cached_formula_values() -> None:
    parsed = sheets.parse_xlsx(office_factory.xlsx_bytes(rows=3))
    _offsets_exact(parsed)
    assert parsed.page_count == 2
    tables = [s for s in parsed.sections if s.kind is SectionKind.TABLE]
    assert [(t.heading_path, t.page_start) for t in tables] == [(("Servers",), 1), (("Owners",), 2)]
    assert tables[0].text.splitlines() == [
        "| Host | Cores | Memory GB | Total |",
        "|---|---|---|---|",
        "| host-0000 | 4 | 16 | 64 |",
        "| host-0001 | 5 | 16 | 80 |",
        "| host-0002 | 6 | 16 | 96 |",
    ]
    assert parsed.warnings == ()


def test_xlsx_formulas_never_calculated_read_as_formulas_with_a_warning() -> None:
    """A formula with no cached value is not an empty cell: it reads as its formula, and the
    document's warning counts such cells per sheet (the job item shows it)."""
    parsed = parse_document(_doc(office_factory.uncalculated_xlsx_bytes(), XLSX))
    budget, summary = (s.text.splitlines() for s in parsed.sections if s.kind is SectionKind.TABLE)
    assert budget[2:] == [
        "| Cranes | 18450 | =B2:B3*2 |",
        "| Pallets | 920 |  |",
        "| Total | =SUM(B2:B3) |  |",
    ]
    assert summary[2:] == ["| Budget total | =Budget!B4 |", "| Owner | Marta Quintero |"]
    assert parsed.warnings == ("formulas_without_values: 3 (Budget: 2, Summary: 1)",)


def test_long_sheet_chunks_each_start_with_the_header_row() -> None:
    parsed = sheets.parse_xlsx(office_factory.xlsx_bytes(rows=400))
    chunks = chunk_document(
        parsed,
        tenant_id="t",
        external_id="x",
        version=1,
        # ~2.5 characters a token, as the embedder's tokenizer counts digits and pipes.
        count_tokens=lambda text: len(text) * 2 // 5,
        chunk_tokens=256,
        overlap_tokens=32,
    )
    servers = [c for c in chunks if c.level == 0 and c.heading_path == ("Servers",)]
    assert len(servers) > 10
    for chunk in servers:
        body = chunk.text.removeprefix("Servers\n\n")
        assert body.startswith("| Host | Cores | Memory GB | Total |\n|---|---|---|---|\n"), chunk.text[:80]
        assert all(line.startswith("|") and line.endswith("|") for line in body.splitlines())
    assert {c.page_start for c in servers} == {1}


def test_csv_delimiters_are_sniffed() -> None:
    for delimiter in (",", ";", "\t"):
        parsed = sheets.parse_csv(office_factory.csv_bytes(rows=2, delimiter=delimiter))
        assert parsed.text.splitlines() == [
            "| city | country | population |",
            "|---|---|---|",
            "| city0 | Freedonia | 1000 |",
            "| city1 | Freedonia | 1001 |",
        ]


@pytest.mark.parametrize(
    ("build", "mime"),
    [(office_factory.docx_bytes, DOCX), (office_factory.pptx_bytes, PPTX), (office_factory.xlsx_bytes, XLSX)],
    ids=["docx", "pptx", "xlsx"],
)
def test_office_files_are_sniffed_whatever_is_declared(build, mime: str) -> None:
    data = build()
    assert sniff_mime(data, "application/octet-stream") == mime
    parsed = parse_document(_doc(data, "text/plain"))
    assert any(w == f"mislabelled_content: declared text/plain, parsed as {mime}" for w in parsed.warnings)


def test_csv_goes_through_the_dispatcher() -> None:
    parsed = parse_document(_doc(office_factory.csv_bytes(), CSV))
    assert parsed.sections[0].kind is SectionKind.TABLE


@pytest.mark.parametrize(
    ("content", "mime", "code"),
    [
        (hostile_office.encrypted(office_factory.docx_bytes()), DOCX, "encrypted_document"),
        (hostile_office.ole_header(encrypted_package=True), XLSX, "encrypted_document"),
        (hostile_office.ole_header(encrypted_package=False), "application/msword", "unsupported_type"),
        (b"PK\x03\x04 not really a zip", DOCX, "corrupt_document"),
        (bytes(range(256)) * 4, PPTX, "mislabelled_content"),
        (b"\x00\x01" * 100, "application/zip", "unsupported_type"),
    ],
    ids=["encrypted-docx", "encrypted-xlsx", "legacy-doc", "broken-zip", "random-bytes", "zip-type"],
)
def test_unreadable_office_files_get_reason_codes(content: bytes, mime: str, code: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_document(_doc(content, mime))
    assert caught.value.code == code


def test_pptx_grouped_shapes_are_read_inside_their_group() -> None:
    import io

    import pptx as python_pptx
    from pptx.util import Inches

    deck = python_pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Architecture"
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(4), Inches(3), Inches(1)).text_frame.text = "lower box"
    group.shapes.add_textbox(Inches(1), Inches(2), Inches(3), Inches(1)).text_frame.text = "upper box"
    out = io.BytesIO()
    deck.save(out)
    parsed = pptx.parse(out.getvalue())
    assert [s.text for s in parsed.sections] == ["Architecture", "upper box", "lower box"]
