"""What a job did is visible: warnings in the job API and ``ragline jobs show``, and titles
derived from the file (Markdown H1, HTML <title>, PDF metadata) when the connector gave none."""

from __future__ import annotations

import base64
import json

import psycopg
import pymupdf
import pytest
from fastapi.testclient import TestClient

from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from catalog.principals import ensure_tenant
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


def _ended_jobs(db_url: str) -> tuple[str, str]:
    """An ingest job of 3 documents, one failed, and a model migration that re-embedded 40 of
    40 chunks, written as their workers would."""
    with psycopg.connect(db_url) as conn:
        ensure_tenant(conn, tenant_id="acme")
        items = [NewItem(f"d{i}.txt", "text/plain", payload=b"x") for i in range(3)]
        ingest = jobs_repo.create_job(conn, tenant_id="acme", kind="ingest", items=items)
        assert jobs_repo.claim_job(conn, job_id=ingest, owner="w", lease_seconds=60)
        for no, state in enumerate(("succeeded", "succeeded", "failed")):
            jobs_repo.finish_item(conn, job_id=ingest, item_no=no, state=state, error_code="empty_document")
        assert jobs_repo.finish_job(conn, job_id=ingest) == "partially_failed"
        reembed = jobs_repo.create_job(conn, tenant_id="acme", kind="reembed", items=[])
        assert jobs_repo.claim_job(conn, job_id=reembed, owner="w", lease_seconds=60)
        jobs_repo.set_progress(conn, job_id=reembed, total=40, done=40, add_chunks=40)
        jobs_repo.end_job(conn, job_id=reembed, state="succeeded")
    return str(ingest), str(reembed)


def test_one_unit_and_one_definition_of_done_in_the_api_and_the_cli(
    foundation_client_shared: TestClient,
    db_url: str,
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A migration counts chunks and says so; a job with a failure reads "3/3 documents
    processed · 1 failed" in the API, ``ragline jobs list|show`` (and the console, which shows
    the API's ``progress``), never "3/3 done" in one place and "2/3" in another."""
    ingest, reembed = _ended_jobs(db_url)
    admin = make_key(db_url, "acme", ["admin"])
    jobs = {j["job_id"]: j for j in foundation_client_shared.get("/v1/jobs", headers=_auth(admin)).json()}
    assert jobs[ingest]["unit"] == "documents" and jobs[reembed]["unit"] == "chunks"
    assert jobs[ingest]["documents"] == {"total": 3, "done": 3, "failed": 1, "unchanged": 0}
    assert jobs[ingest]["progress"] == "3/3 documents processed · 1 failed"
    assert jobs[reembed]["progress"] == "40/40 chunks processed"
    shown = foundation_client_shared.get(f"/v1/jobs/{reembed}", headers=_auth(admin)).json()
    assert shown["unit"] == "chunks" and shown["progress"] == "40/40 chunks processed"

    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path / "cli"))
    get_settings.cache_clear()
    try:
        assert main(["jobs", "list"]) == 0
        table = capsys.readouterr().out
        assert "3/3 documents processed · 1 failed" in table and "40/40 chunks processed" in table
        assert "documents" not in next(line for line in table.splitlines() if reembed in line)
        assert main(["jobs", "list", "--json"]) == 0
        listed = {j["job_id"]: j for j in json.loads(capsys.readouterr().out)}
        assert listed[reembed]["unit"] == "chunks" and listed[ingest]["progress"] == jobs[ingest]["progress"]
        assert main(["jobs", "show", reembed]) == 0
        text = capsys.readouterr().out
        assert "40/40 chunks processed" in text and "documents" not in text
        assert main(["jobs", "show", ingest]) == 0
        assert "3/3 documents processed · 1 failed" in capsys.readouterr().out
    finally:
        get_settings.cache_clear()


def test_status_shows_a_running_migrations_progress_in_chunks(
    foundation_client_shared: TestClient,
    db_url: str,
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``ragline status`` and ``GET /v1/admin/status`` name the unit of a running job, and the
    schema migration is called that, apart from the index rebuild."""
    with psycopg.connect(db_url) as conn:
        ensure_tenant(conn, tenant_id="acme")
        reembed = jobs_repo.create_job(conn, tenant_id="acme", kind="reembed", items=[])
        assert jobs_repo.claim_job(conn, job_id=reembed, owner="w", lease_seconds=3600)
        jobs_repo.set_progress(conn, job_id=reembed, total=40, done=12, add_chunks=12)
    operator = make_key(db_url, "operator", ["operator"], principal="service:ops")
    status = foundation_client_shared.get("/v1/admin/status", headers=_auth(operator)).json()
    running = {j["job_id"]: j for j in status["running_jobs"]}
    assert running[str(reembed)]["unit"] == "chunks"
    assert running[str(reembed)]["progress"] == "12/40 chunks processed"

    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path / "cli"))
    get_settings.cache_clear()
    try:
        assert main(["status"]) == 0
        out = capsys.readouterr().out
    finally:
        get_settings.cache_clear()
    assert "12/40 chunks processed" in out
    assert "schema migration (last applied)" in out and "last migration" not in out
    assert "last index rebuild" in out
