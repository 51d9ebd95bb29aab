from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.errors import ParseError
from core.records import SectionKind
from ingest import pdf
from tests.unit.ingest import pdf_factory

REAL_PDFS = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "pdfs"


def _assert_offsets(parsed) -> None:
    for section in parsed.sections:
        assert parsed.text[section.char_start : section.char_end] == section.text


def test_headings_tables_and_hyphenation() -> None:
    parsed = pdf.parse(pdf_factory.heading_table_pdf())
    _assert_offsets(parsed)
    headings = [s for s in parsed.sections if s.kind is SectionKind.HEADING]
    assert [h.text for h in headings] == ["Quarterly Report", "Revenue Overview"]
    assert headings[1].heading_path == ("Quarterly Report", "Revenue Overview")
    assert parsed.title == "Quarterly Report"
    assert parsed.page_count == 1
    assert "information architecture" in parsed.text
    tables = [s for s in parsed.sections if s.kind is SectionKind.TABLE]
    assert len(tables) == 1
    assert tables[0].text.splitlines()[0] == "| Region | Sales | Growth |"
    assert "| North | 120 | 5% |" in tables[0].text
    # Table text is not also in the normal flow.
    assert parsed.text.count("North") == 1
    assert all(s.page_start == 1 and s.page_end == 1 for s in parsed.sections)


def test_two_columns_read_left_column_first() -> None:
    parsed = pdf.parse(pdf_factory.two_column_pdf())
    text = parsed.text
    assert text.index("Left paragraph 2") < text.index("Right paragraph 0")
    assert text.index("Right paragraph 0") < text.index("Right paragraph 2")


def test_running_header_and_page_numbers_dropped() -> None:
    parsed = pdf.parse(pdf_factory.running_header_pdf(pages=5))
    assert "Confidential Handbook" not in parsed.text
    assert "of 5" not in parsed.text
    assert [s.page_start for s in parsed.sections] == [1, 2, 3, 4, 5]


def test_chapter_headings_at_the_top_of_pages_are_kept_as_headings() -> None:
    # "Chapter N" sits in the top margin of every other page: with digits ignored it looked
    # like a running header and was dropped, leaving the chapters without a section path.
    parsed = pdf.parse(pdf_factory.chapter_pdf(chapters=4))
    headings = [s for s in parsed.sections if s.kind is SectionKind.HEADING]
    assert [(h.text, h.page_start) for h in headings] == [(f"Chapter {n}", 2 * n - 1) for n in range(1, 5)]
    body = [s for s in parsed.sections if s.kind is SectionKind.PARAGRAPH]
    assert [s.heading_path for s in body] == [(f"Chapter {n}",) for n in range(1, 5) for _ in range(2)]
    assert parsed.title == "Chapter 1"


def test_running_header_kept_when_too_few_pages() -> None:
    parsed = pdf.parse(pdf_factory.running_header_pdf(pages=2))
    assert parsed.text.count("Confidential Handbook") == 2


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (pdf_factory.encrypted_pdf(), "encrypted_pdf"),
        (pdf_factory.image_only_pdf(), "image_only_pdf"),
        (pdf_factory.blank_pdf(), "empty_document"),
        (b"", "empty_document"),
        (b"%PDF-1.7\n" + bytes(range(256)) * 8, "corrupt_pdf"),
        (pdf_factory.heading_table_pdf()[:150], "corrupt_pdf"),
    ],
    ids=["encrypted", "image-only", "blank-page", "empty-file", "random-bytes", "truncated"],
)
def test_unparseable_pdfs_raise_coded_errors(data: bytes, code: str) -> None:
    with pytest.raises(ParseError) as caught:
        pdf.parse(data)
    assert caught.value.code == code


def test_image_only_error_says_so() -> None:
    with pytest.raises(ParseError, match="no extractable text"):
        pdf.parse(pdf_factory.image_only_pdf())


@pytest.mark.slow
def test_many_pages_parse_page_by_page_in_bounded_time() -> None:
    data = pdf_factory.many_pages_pdf(520)
    started = time.perf_counter()
    parsed = pdf.parse(data)
    elapsed = time.perf_counter() - started
    assert parsed.page_count == 520
    assert elapsed < 20
    bodies = [s for s in parsed.sections if s.kind is SectionKind.PARAGRAPH]
    assert [s.page_start for s in bodies] == list(range(1, 521))
    assert bodies[-1].heading_path == ("Section 520",)


def _real_pdf(name: str) -> bytes:
    path = REAL_PDFS / name
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path.read_bytes()


def test_real_libtasn1_manual() -> None:
    parsed = pdf.parse(_real_pdf("libtasn1.pdf"))
    _assert_offsets(parsed)
    assert parsed.page_count > 30
    headings = [s.text for s in parsed.sections if s.kind is SectionKind.HEADING]
    assert "1 Introduction" in headings
    assert "2.1 ASN.1 syntax" in headings
    assert any(
        s.heading_path[-2:] == ("2 ASN.1 structure handling", "2.1 ASN.1 syntax") for s in parsed.sections
    )
    assert max(s.page_end or 0 for s in parsed.sections) == parsed.page_count


def test_real_shared_mime_info_spec() -> None:
    parsed = pdf.parse(_real_pdf("shared-mime-info-spec.pdf"))
    _assert_offsets(parsed)
    assert parsed.page_count > 10
    assert parsed.title == "Shared MIME-info Database"
    headings = [s.text for s in parsed.sections if s.kind is SectionKind.HEADING]
    assert "2.4. The glob files" in headings
    # The running header appears on every page but once in the title and once in a citation.
    assert parsed.text.count("Shared MIME-info Database") <= 3
    assert parsed.page_count <= parsed.text.count("\n\n") + 1
