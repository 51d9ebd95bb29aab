"""DOCX, PPTX, XLSX, CSV, ODT, ODP, ODS, scanned PDFs and images through the real API, parse
workers, PostgreSQL, embedding model and (for the scans) Tesseract; files built by the writer
libraries."""

from __future__ import annotations

import base64
import io
import shutil

import pymupdf
import pytest
from fastapi.testclient import TestClient

from ingest.parse import CSV, DOCX, EML, EPUB, ODS, ODT, PNG, PPTX, XLSX
from tests import hostile_office
from tests.integration.api.conftest import make_key, wait_job
from tests.unit.ingest import office_factory

pytestmark = pytest.mark.integration
needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs tesseract-ocr (Debian)")

ROTATION = office_factory.FACTS["rotation"]
BACKUPS = office_factory.FACTS["backups"]
QUERIES = {"rotation": "how often are signing keys rotated", "backups": "how long are database backups kept"}
DISTRACTORS = [
    ("lunch", "# Lunch\n\nMonday soup, Tuesday pasta, Wednesday fish and chips in the canteen."),
    ("parking", "# Parking\n\nVisitors park on level two; badges open the barrier after six."),
]


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _doc(external_id: str, content: bytes, mime: str) -> dict[str, object]:
    return {
        "external_id": external_id,
        "content_base64": base64.b64encode(content).decode(),
        "mime_type": mime,
        "acl": {"public": True},
    }


def _search(client: TestClient, token: str, query: str, **extra: object) -> list[dict]:
    resp = client.post("/v1/retrieve", json={"query": query, "top_k": 5, **extra}, headers=_auth(token))
    assert resp.status_code == 200, resp.text
    return resp.json()["results"]


def test_office_files_keep_structure_through_the_api(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:reader")
    docs = [
        _doc("handbook.docx", office_factory.docx_bytes(rows=120), DOCX),
        _doc("deck.pptx", office_factory.pptx_bytes(slides=3), PPTX),
        _doc("servers.xlsx", office_factory.xlsx_bytes(rows=300), XLSX),
        _doc("budget.xlsx", office_factory.uncalculated_xlsx_bytes(), XLSX),
        _doc("cities.csv", office_factory.csv_bytes(rows=5), CSV),
        _doc("archive.zip", b"PK\x03\x04", "application/zip"),
        _doc("secret.docx", hostile_office.encrypted(office_factory.docx_bytes()), DOCX),
    ]
    resp = full_client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest))
    assert resp.status_code == 202, resp.text
    assert [(r["external_id"], r["code"]) for r in resp.json()["rejections"]] == [
        ("archive.zip", "unsupported_type")
    ]
    job = wait_job(full_client, ingest, resp.json()["job_id"])
    assert [(e["external_id"], e["code"]) for e in job["errors"]] == [("secret.docx", "encrypted_document")]
    assert job["documents"] == {"total": 6, "done": 6, "failed": 1, "unchanged": 0}
    # Formulas no application calculated: the job item says so (a workbook that has its
    # cached values, servers.xlsx, says nothing).
    warnings = {w["external_id"]: w["warnings"] for w in job["warnings"]}
    assert warnings == {"budget.xlsx": ["formulas_without_values: 3 (Budget: 2, Summary: 1)"]}

    hit = _search(full_client, reader, "database backups nightly thirty five days", mode="lexical")[0]
    assert hit["document_external_id"] == "handbook.docx"
    assert hit["section_path"] == ["Storage", "Backups"]
    slide = _search(full_client, reader, "uptime latency metric", mode="lexical")[0]
    assert slide["document_external_id"] == "deck.pptx" and slide["page_range"] == [2, 2]
    assert slide["section_path"] == ["Slide title 2"]
    row = _search(full_client, reader, "host-0250", mode="lexical")[0]
    assert row["document_external_id"] == "servers.xlsx"
    assert row["section_path"] == ["Servers"] and row["page_range"] == [1, 1]
    # A chunk from deep inside the sheet still names its columns.
    assert (
        "| Host | Cores | Memory GB | Total |" in row["text"] and "| host-0250 | 6 | 16 | 96 |" in row["text"]
    )
    owners = _search(full_client, reader, "ops@example.org platform contact", mode="lexical")[0]
    assert owners["section_path"] == ["Owners"] and owners["page_range"] == [2, 2]
    _opendocument_files_keep_structure(full_client, db_url)


def _opendocument_files_keep_structure(client: TestClient, db_url: str) -> None:
    """The same documents as ODT, ODP (uploaded, its type told by its suffix alone) and ODS,
    in a tenant of their own so their twins above do not compete for the top hit."""
    ingest = make_key(db_url, "acme-odf", ["ingest"])
    reader = make_key(db_url, "acme-odf", ["query"], principal="user:reader")
    docs = [
        _doc("handbook.odt", office_factory.odt_bytes(rows=120, comment=True, tracked=True), ODT),
        _doc("servers.ods", office_factory.ods_bytes(rows=300), ODS),
        _doc("locked.ods", hostile_office.encrypted_odf(office_factory.ods_bytes()), ODS),
    ]
    resp = client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest))
    assert resp.status_code == 202, resp.text
    job = wait_job(client, ingest, resp.json()["job_id"])
    assert [(e["external_id"], e["code"]) for e in job["errors"]] == [("locked.ods", "encrypted_document")]
    warnings = {w["external_id"]: w["warnings"] for w in job["warnings"]}
    assert warnings["handbook.odt"] == ["comments_dropped: 1"]
    upload = client.post(
        "/v1/documents:upload",
        headers=_auth(ingest),
        files={"file": ("deck.odp", office_factory.odp_bytes(slides=3), "application/octet-stream")},
        data={"external_id": "deck.odp", "acl": '{"public": true}'},
    )
    assert upload.status_code == 202, upload.text
    assert wait_job(client, ingest, upload.json()["job_id"])["state"] == "succeeded"

    hit = _search(client, reader, "database backups nightly thirty five days", mode="lexical")[0]
    assert hit["document_external_id"] == "handbook.odt" and hit["title"] == "Operations handbook"
    assert hit["section_path"] == ["Storage", "Backups"]
    approved = _search(client, reader, "budget status", mode="lexical")[0]
    assert "approved" in approved["text"] and "rejected" not in approved["text"]
    slide = _search(client, reader, "uptime latency metric", mode="lexical")[0]
    assert slide["document_external_id"] == "deck.odp" and slide["page_range"] == [2, 2]
    assert slide["section_path"] == ["Slide title 2"]
    row = _search(client, reader, "host-0250", mode="lexical")[0]
    assert row["document_external_id"] == "servers.ods"
    assert row["section_path"] == ["Servers"] and row["page_range"] == [1, 1]
    # Deep inside the sheet a chunk still names its columns; the formula gives its cached value.
    assert "| Host | Cores | Memory GB | Total | Bought |" in row["text"]
    assert "| host-0250 | 6 | 16 | 96 | 2026-12-01 |" in row["text"]
    owners = _search(client, reader, "ops@example.org platform contact", mode="lexical")[0]
    assert owners["section_path"] == ["Owners"] and owners["page_range"] == [2, 2]


@needs_tesseract
def test_scans_and_images_are_ocrd_with_warnings(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:reader")
    scan = office_factory.scanned_pdf(
        ["A typed page about the harbour.", ["The scanned page names", "the lighthouse keeper."]]
    )
    docs = [_doc("scan.pdf", scan, "application/pdf")]
    resp = full_client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest))
    job = wait_job(full_client, ingest, resp.json()["job_id"])
    assert job["state"] == "succeeded", job
    (item,) = job["warnings"]
    assert any(w.startswith("ocr_pages: 2 (mean confidence") for w in item["warnings"]), item
    hit = _search(full_client, reader, "lighthouse keeper", mode="lexical")[0]
    # Both pages fit one chunk: it spans the typed page 1 and the scanned page 2.
    assert hit["document_external_id"] == "scan.pdf" and hit["page_range"] == [1, 2]
    # An image, uploaded as a file.
    png = office_factory.png_bytes(["The ferry timetable changes in October."])
    resp = full_client.post(
        "/v1/documents:upload",
        headers=_auth(ingest),
        files={"file": ("timetable.png", png, PNG)},
        data={"external_id": "timetable.png", "mime_type": PNG, "acl": '{"public": true}'},
    )
    assert resp.status_code == 202, resp.text
    assert wait_job(full_client, ingest, resp.json()["job_id"])["state"] == "succeeded"
    assert _search(full_client, reader, "ferry timetable October", mode="lexical")[0][
        "document_external_id"
    ] == ("timetable.png")


def _facts_pdf() -> bytes:
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 90), "Operations handbook", fontsize=20, fontname="hebo")
    page.insert_text((72, 130), ROTATION, fontsize=11)
    page.insert_text((72, 150), BACKUPS, fontsize=11)
    return doc.tobytes()


def _facts_html() -> bytes:
    head = "<html><head><title>Operations handbook</title></head>"
    return f"{head}<body><p>{ROTATION}</p><p>{BACKUPS}</p></body></html>".encode()


def _facts_pptx() -> bytes:
    import pptx

    deck = pptx.Presentation()
    for title, fact in (("Keys", ROTATION), ("Backups", BACKUPS)):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text_frame.text = fact
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _facts_scan() -> bytes:
    doc = pymupdf.open()
    page = doc.new_page()
    png = office_factory.png_bytes([ROTATION[:45], ROTATION[45:], BACKUPS[:45], BACKUPS[45:]])
    page.insert_image(pymupdf.Rect(36, 36, page.rect.width - 36, 400), stream=png)
    return doc.tobytes()


@needs_tesseract
def test_same_content_in_every_format_answers_with_the_same_top_document(
    full_client: TestClient, db_url: str
) -> None:
    formats = {
        "pdf": (_facts_pdf(), "application/pdf"),
        "docx": (office_factory.docx_bytes(rows=2), DOCX),
        "odt": (office_factory.odt_bytes(rows=2), ODT),
        "pptx": (_facts_pptx(), PPTX),
        "html": (_facts_html(), "text/html"),
        "scan": (_facts_scan(), "application/pdf"),
    }
    for name, (content, mime) in formats.items():
        tenant = f"fmt-{name}"
        ingest = make_key(db_url, tenant, ["ingest"])
        docs = [_doc("facts", content, mime)] + [
            {"external_id": ext, "text": text, "mime_type": "text/markdown", "acl": {"public": True}}
            for ext, text in DISTRACTORS
        ]
        resp = full_client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest))
        assert wait_job(full_client, ingest, resp.json()["job_id"])["state"] == "succeeded"
        reader = make_key(db_url, tenant, ["query"], principal="user:reader")
        for query in QUERIES.values():
            for mode in ("dense", "lexical", "hybrid"):
                top = _search(full_client, reader, query, mode=mode)[0]["document_external_id"]
                assert top == "facts", (name, query, mode)


def test_epub_and_email_through_the_api(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:reader")
    docs = [
        _doc("manual.epub", office_factory.epub_bytes(), EPUB),
        _doc("audit.eml", office_factory.eml_bytes(), EML),
        {
            **_doc("tagged.eml", office_factory.eml_bytes(attachments=False), EML),
            "metadata": {"email_to": "x"},
        },
        _doc("nested.eml", hostile_office.nested_mime(1000), EML),
    ]
    resp = full_client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest))
    assert resp.status_code == 202, resp.text
    job = wait_job(full_client, ingest, resp.json()["job_id"])
    assert [(e["external_id"], e["code"]) for e in job["errors"]] == [("nested.eml", "mime_too_complex")]
    skipped = {w["external_id"]: w["warnings"] for w in job["warnings"]}
    assert "attachment_skipped: bundle.zip (application/zip, unsupported type)" in skipped["audit.eml"]

    lamp = _search(full_client, reader, "lamp cleaned every morning", mode="lexical")[0]
    assert lamp["document_external_id"] == "manual.epub" and lamp["title"] == "The Lighthouse Manual"
    assert lamp["section_path"] == ["Chapter 2 title"] and lamp["page_range"] == [2, 2]
    audit = _search(full_client, reader, "stale keys severity", mode="lexical")
    assert audit[0]["title"] == "Quarterly audit results"
    assert audit[0]["metadata"]["email_from"] == "Alice Auditor <alice@example.org>"
    # The headers are filterable metadata; the connector's own metadata wins over them.
    by_sender = _search(
        full_client,
        reader,
        "audit issues",
        mode="lexical",
        filters={"metadata": {"email_to": ["ops@example.org"]}},
    )
    assert {r["document_external_id"] for r in by_sender} == {"audit.eml"}
    attached = _search(full_client, reader, "database backups thirty five days", mode="lexical")[0]
    # The attachment is a document of its own that names its message.
    assert attached["document_external_id"] == "audit.eml#attachment=1"
    assert attached["title"] == "handbook.docx" and attached["section_path"] == ["Storage", "Backups"]
    assert attached["metadata"]["parent_external_id"] == "audit.eml"
