"""What a job did is visible: warnings in the job API and ``ragline jobs show``, and titles
derived from the file (Markdown H1, HTML <title>, PDF metadata) when the connector gave none."""

from __future__ import annotations

import base64
import json

import pymupdf
import pytest
from fastapi.testclient import TestClient

from cli.main import main
from core.settings import get_settings
from tests.integration.api.conftest import make_key, wait_job

pytestmark = pytest.mark.integration


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def _pdf(text: str, title: str) -> bytes:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), text, fontsize=11)
    doc.set_metadata({"title": title})
    return doc.tobytes()


def test_titles_are_derived_and_warnings_shown(
    full_client: TestClient, db_url: str, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:u")
    acl = {"principals": ["user:u"]}
    pdf = base64.b64encode(_pdf("Kestrel nesting survey results.", "Kestrel survey")).decode()
    docs = [
        {
            "external_id": "md",
            "mime_type": "text/markdown",
            "acl": acl,
            "text": "# Osprey migration\n\nOsprey migration routes over the lake.",
        },
        {
            "external_id": "html",
            "mime_type": "text/html",
            "acl": acl,
            "text": "<html><head><title>Heron colonies</title></head><body><p>Heron colonies nest"
            " in reeds.</p></body></html>",
        },
        # Declared plain text, but a PDF: parsed as PDF with a mislabelled_content warning.
        {"external_id": "pdf", "mime_type": "text/plain", "acl": acl, "content_base64": pdf},
    ]
    resp = full_client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest))
    assert resp.status_code == 202, resp.text
    job = wait_job(full_client, ingest, resp.json()["job_id"])
    assert job["state"] == "succeeded", job
    warned = {w["external_id"]: w["warnings"] for w in job["warnings"]}
    assert list(warned) == ["pdf"]
    assert warned["pdf"][0].startswith("mislabelled_content")

    titles = {}
    for query in ("osprey migration", "heron colonies", "kestrel nesting survey"):
        hits = full_client.post(
            "/v1/retrieve", json={"query": query, "mode": "lexical"}, headers=_auth(reader)
        ).json()["results"]
        titles[hits[0]["document_external_id"]] = hits[0]["title"]
    assert titles == {"md": "Osprey migration", "html": "Heron colonies", "pdf": "Kestrel survey"}

    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path / "cli"))
    get_settings.cache_clear()
    try:
        assert main(["jobs", "show", job["job_id"]]) == 0
        out = capsys.readouterr().out
        assert "warnings" in out and "mislabelled_content" in out
        assert main(["jobs", "show", job["job_id"], "--json"]) == 0
        body = json.loads(capsys.readouterr().out)
        assert body["warnings"][0]["external_id"] == "pdf"
    finally:
        get_settings.cache_clear()
