from __future__ import annotations

import pytest

from core.errors import ParseError
from core.records import ParsedDocument, SourceDocument
from ingest import parse as parse_module
from ingest.parse import PARSERS, parse_document, sniff_mime
from ragline_client.models import MIME_TYPES
from tests.unit.ingest import pdf_factory


def _doc(content: bytes, mime: str, title: str | None = None) -> SourceDocument:
    return SourceDocument(tenant_id="t", external_id="e", mime_type=mime, content=content, title=title)


def test_parsers_cover_the_supported_types() -> None:
    # The edge accepts exactly what a parser exists for.
    assert set(PARSERS) == set(MIME_TYPES)
    assert {"application/pdf", "text/html", "text/markdown", "text/plain", "text/csv", "image/png"} <= set(
        PARSERS
    )


def test_sniff_pdf_magic_wins_over_declaration() -> None:
    assert sniff_mime(pdf_factory.blank_pdf(), "text/plain") == "application/pdf"
    assert sniff_mime(b"%PDF-1.4 ...", "application/octet-stream") == "application/pdf"


def test_sniff_declared_pdf_that_is_text_becomes_plain_text() -> None:
    assert sniff_mime(b"just some notes", "application/pdf; charset=x") == "text/plain"


def test_sniff_declared_pdf_that_is_binary_is_mislabelled() -> None:
    with pytest.raises(ParseError) as caught:
        sniff_mime(bytes(range(256)) * 4, "application/pdf")
    assert caught.value.code == "mislabelled_content"


def test_sniff_html_declared_as_plain_text_stays_plain() -> None:
    assert sniff_mime(b"<html><body><p>x</p></body></html>", "Text/Plain") == "text/plain"


def test_parse_document_dispatches_and_reports_mislabelling() -> None:
    parsed = parse_document(_doc(b"notes about things", "application/pdf"))
    assert parsed.text == "notes about things"
    assert parsed.warnings == ("mislabelled_content: declared application/pdf, parsed as text/plain",)
    pdf = parse_document(_doc(pdf_factory.heading_table_pdf(), "text/plain"))
    assert pdf.page_count == 1
    assert any(w.startswith("mislabelled_content") for w in pdf.warnings)


def test_parse_document_keeps_html_tags_for_plain_text() -> None:
    parsed = parse_document(_doc(b"<p>hello</p>", "text/plain"))
    assert parsed.text == "<p>hello</p>"


def test_connector_title_wins() -> None:
    parsed = parse_document(_doc(b"# Parsed\n\nbody", "text/markdown", title="Given"))
    assert parsed.title == "Given"
    assert parse_document(_doc(b"# Parsed\n\nbody", "text/markdown")).title == "Parsed"


@pytest.mark.parametrize(
    ("content", "mime", "code"),
    [
        (b"data", "application/zip", "unsupported_type"),
        (b"", "text/plain", "empty_document"),
        (b"  \n\t ", "text/markdown", "empty_document"),
        (b"<html><script>x()</script></html>", "text/html", "empty_document"),
        (pdf_factory.encrypted_pdf(), "application/pdf", "encrypted_pdf"),
    ],
)
def test_parse_document_error_codes(content: bytes, mime: str, code: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_document(_doc(content, mime))
    assert caught.value.code == code


def test_unexpected_parser_failure_is_wrapped_without_text(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(data: bytes, _ocr: object) -> ParsedDocument:
        raise KeyError(data.decode())

    monkeypatch.setitem(parse_module.PARSERS, "text/plain", broken)
    with pytest.raises(ParseError) as caught:
        parse_document(_doc(b"top secret words", "text/plain"))
    assert caught.value.code == "parse_failed"
    assert "KeyError" in caught.value.message
    assert "secret" not in str(caught.value)
