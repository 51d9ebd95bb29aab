"""EPUB and e-mail parsing on files EbookLib and the ``email`` package build in the test."""

from __future__ import annotations

import pytest

from core.errors import ParseError
from core.records import SectionKind, SourceDocument
from ingest import eml, epub
from ingest.parse import DOCX, EML, EPUB, parse_document, sniff_mime
from tests import hostile_office
from tests.unit.ingest import office_factory


def _doc(content: bytes, mime: str) -> SourceDocument:
    return SourceDocument(tenant_id="t", external_id="e", mime_type=mime, content=content)


def test_epub_chapters_in_spine_order_with_toc_titles() -> None:
    parsed = epub.parse(office_factory.epub_bytes(chapters=3))
    assert parsed.title == "The Lighthouse Manual" and parsed.page_count == 3
    headings = [(s.text, s.page_start) for s in parsed.sections if s.kind is SectionKind.HEADING]
    # Chapter 2 has no heading in its XHTML: its table-of-contents title stands in.
    assert headings == [("Chapter 1: Keepers", 1), ("Chapter 2 title", 2), ("Chapter 3: Keepers", 3)]
    lamp = next(s for s in parsed.sections if "lamp" in s.text)
    assert lamp.heading_path == ("Chapter 2 title",) and lamp.page_start == 2
    table = next(s for s in parsed.sections if s.kind is SectionKind.TABLE)
    assert table.text.splitlines()[0] == "| Part | Interval |"


def test_epub_is_sniffed_from_its_mimetype_member() -> None:
    assert sniff_mime(office_factory.epub_bytes(), "application/octet-stream") == EPUB


def test_email_subject_headers_body_and_attachments() -> None:
    parsed = parse_document(_doc(office_factory.eml_bytes(), EML))
    assert parsed.title == "Quarterly audit results"
    assert dict(parsed.metadata) == {
        "email_from": "Alice Auditor <alice@example.org>",
        "email_to": "ops@example.org",
        "email_date": "2026-12-01T09:30:00+00:00",
    }
    assert parsed.sections[0].text.startswith("From: Alice Auditor <alice@example.org>\nTo: ops@example.org")
    # Of the alternatives, the HTML body (with its table), not the plain one.
    assert "HTML body: the audit found two issues." in parsed.text and "Plain body" not in parsed.text
    assert "| stale keys | high |" in parsed.text
    # The attachments are documents of their own: none of their text is the message's.
    assert office_factory.FACTS["backups"] not in parsed.text and "Attachment:" not in parsed.text
    handbook, cities = parsed.attachments
    assert (handbook.number, handbook.filename, handbook.mime_type) == (1, "handbook.docx", DOCX)
    backups = next(s for s in handbook.parsed.sections if office_factory.FACTS["backups"] in s.text)
    assert backups.heading_path == ("Storage", "Backups")
    assert (cities.number, cities.filename, cities.mime_type) == (2, "cities.csv", "text/csv")
    assert any(s.kind is SectionKind.TABLE for s in cities.parsed.sections)
    assert len(handbook.digest) == 64 and handbook.byte_size > 0
    # The unsupported one is named, never silently dropped; it keeps its number (3).
    assert parsed.warnings == ("attachment_skipped: bundle.zip (application/zip, unsupported type)",)


def test_email_attachment_caps_and_failures_are_named() -> None:
    from email.message import EmailMessage

    message = EmailMessage()
    message["Subject"] = "many"
    message.set_content("Body text.")
    message.add_attachment(b"%PDF-1.7 broken", maintype="application", subtype="pdf", filename="broken.pdf")
    for n in range(eml.MAX_ATTACHMENTS):
        message.add_attachment(f"note {n}".encode(), maintype="text", subtype="plain", filename=f"n{n}.txt")
    parsed = parse_document(_doc(message.as_bytes(), EML))
    assert "Body text." in parsed.text
    # The broken PDF costs itself a reason code; the message and the next attachments stand.
    assert any(
        w.startswith("attachment_failed: broken.pdf (application/pdf, corrupt_pdf") for w in parsed.warnings
    )
    assert [a.number for a in parsed.attachments] == list(range(2, eml.MAX_ATTACHMENTS + 1))
    last = f"n{eml.MAX_ATTACHMENTS - 1}.txt"
    assert (
        f"attachment_skipped: {last} (text/plain, past {eml.MAX_ATTACHMENTS} attachments)" in parsed.warnings
    )


def test_plain_email_without_attachments() -> None:
    parsed = eml.parse(b"Subject: hello\nFrom: a@example.org\n\nFirst paragraph.\n\nSecond paragraph.\n")
    assert parsed.title == "hello"
    assert [s.text for s in parsed.sections] == [
        "From: a@example.org",
        "First paragraph.",
        "Second paragraph.",
    ]


def test_a_thousand_nested_mime_parts_cost_one_document() -> None:
    with pytest.raises(ParseError) as caught:
        parse_document(_doc(hostile_office.nested_mime(1000), EML))
    assert caught.value.code == "mime_too_complex"
    # A few levels are fine, and the deepest text is found.
    assert "nightjar" in parse_document(_doc(hostile_office.nested_mime(5), EML)).text


def test_an_attachment_past_the_text_limit_costs_only_itself() -> None:
    from email.message import EmailMessage

    from ingest.isolation import ParseRequest, parse_limited

    message = EmailMessage()
    message["Subject"] = "big"
    message.set_content("Short body.")
    message.add_attachment(b"word " * 2000, maintype="text", subtype="plain", filename="big.txt")
    message.add_attachment(b"small note", maintype="text", subtype="plain", filename="small.txt")
    parsed = parse_limited(ParseRequest(_doc(message.as_bytes(), EML), 30.0, 5000))
    assert "Short body." in parsed.text
    assert [a.filename for a in parsed.attachments] == ["small.txt"]
    assert "attachment_failed: big.txt (text/plain, too_many_chunks)" in parsed.warnings
