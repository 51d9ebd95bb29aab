"""OCR of scanned PDF pages and images through the real Tesseract (Debian's tesseract-ocr)."""

from __future__ import annotations

import shutil

import pytest

from core.errors import ParseError
from core.records import SourceDocument
from ingest import ocr, pdf
from ingest.ocr import OcrOptions
from ingest.parse import PNG, parse_document
from tests.unit.ingest import office_factory, pdf_factory

pytestmark = pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs tesseract-ocr (Debian)")

SCANNED = ["Scanned page two mentions", "the quarterly audit findings."]


def test_mixed_pdf_ocrs_only_the_scanned_page_and_keeps_page_numbers() -> None:
    data = office_factory.scanned_pdf(
        ["Page one text layer about invoices.", SCANNED, "Page three about payroll."]
    )
    parsed = pdf.parse(data)
    pages = {s.page_start: s.text for s in parsed.sections}
    assert pages[1] == "Page one text layer about invoices."
    assert pages[2] == "Scanned page two mentions the quarterly audit findings."
    assert pages[3] == "Page three about payroll."
    (warning,) = [w for w in parsed.warnings if w.startswith("ocr_pages")]
    assert warning.startswith("ocr_pages: 2 (mean confidence ")
    assert float(warning.split("confidence ")[1].rstrip(")")) > 80


def test_ocr_off_leaves_a_scan_image_only() -> None:
    with pytest.raises(ParseError) as caught:
        pdf.parse(office_factory.scanned_pdf([SCANNED]), OcrOptions(mode="off"))
    assert caught.value.code == "image_only_pdf"
    assert "OCR is off" in caught.value.message


def test_force_ocrs_pages_with_a_text_layer() -> None:
    data = office_factory.scanned_pdf(["Typed text about the harbour master."])
    parsed = pdf.parse(data, OcrOptions(mode="force"))
    assert "harbour master" in parsed.text
    assert any(w.startswith("ocr_pages: 1 ") for w in parsed.warnings)


def test_image_document_is_ocrd_through_the_dispatcher() -> None:
    png = office_factory.png_bytes(["Invoices are archived for ten years."])
    parsed = parse_document(SourceDocument("t", "e", PNG, png))
    assert parsed.text == "Invoices are archived for ten years."
    assert parsed.sections[0].page_start == 1 and parsed.page_count == 1


def test_image_with_ocr_off_is_a_coded_error() -> None:
    png = office_factory.png_bytes(["anything"])
    with pytest.raises(ParseError) as caught:
        parse_document(SourceDocument("t", "e", PNG, png), OcrOptions(mode="off"))
    assert caught.value.code == "ocr_disabled"


def test_page_time_bound_costs_the_page_with_a_warning() -> None:
    data = office_factory.scanned_pdf(["Typed text page.", SCANNED])
    parsed = pdf.parse(data, OcrOptions(page_timeout_seconds=0.001))
    assert parsed.text == "Typed text page."
    assert "ocr_timeout: page 2" in parsed.warnings


def test_unknown_language_fails_the_page_not_the_process() -> None:
    with pytest.raises(ParseError) as caught:
        pdf.parse(office_factory.scanned_pdf([SCANNED]), OcrOptions(languages="xyz"))
    assert caught.value.code == "image_only_pdf" and "ocr_failed" in caught.value.message


def test_german_with_the_deu_model() -> None:
    png = office_factory.png_bytes(["Die Prüfung der Maßnahmen ergab Schäden."])
    parsed = ocr.parse_image(png, OcrOptions(languages="deu"))
    assert parsed.text == "Die Prüfung der Maßnahmen ergab Schäden."


def test_image_only_pdf_without_text_still_fails_as_before() -> None:
    with pytest.raises(ParseError) as caught:
        pdf.parse(pdf_factory.image_only_pdf())
    assert caught.value.code == "image_only_pdf" and "OCR found no text" in caught.value.message
