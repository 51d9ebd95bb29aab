"""An e-mail's attachments as documents of their own, through the real API, parse workers,
PostgreSQL and embedding model: pushed and uploaded, re-pushed, re-ACL'd and deleted. The
messages are built in the test with the ``email`` package, the DOCX with python-docx."""

from __future__ import annotations

import base64
from email.message import EmailMessage
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from ingest.parse import EML
from tests.integration.api.conftest import make_key, wait_job
from tests.unit.ingest import office_factory

pytestmark = pytest.mark.integration

BACKUPS = office_factory.FACTS["backups"]
NOTES = "The harbour crane inspection is due every ninth week, signed off by the quay master."
DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _message(*, notes: bool = True, docx: bytes | None = None) -> bytes:
    """A body, a DOCX (1), a text file (2, unless ``notes`` is off) and a ZIP (last)."""
    message = EmailMessage()
    message["Subject"] = "Harbour maintenance plan"
    message["From"] = "Quay Master <quay@example.org>"
    message["To"] = "ops@example.org"
    message["Date"] = "Tue, 01 Dec 2026 09:30:00 +0000"
    message.set_content("Body: the plan for the winter season is attached.")
    message.add_attachment(
        docx or office_factory.docx_bytes(),
        maintype="application",
        subtype=DOCX_MIME.split("/")[1],
        filename="handbook.docx",
    )
    if notes:
        message.add_attachment(NOTES.encode(), maintype="text", subtype="plain", filename="notes.txt")
    message.add_attachment(b"PK\x03\x04zip", maintype="application", subtype="zip", filename="bundle.zip")
    return message.as_bytes()


def _push(
    client: TestClient,
    token: str,
    external_id: str,
    content: bytes,
    acl: dict,
    connector: str = "",
    metadata: dict[str, str] | None = None,
) -> dict:
    doc = {
        "external_id": external_id,
        "content_base64": base64.b64encode(content).decode(),
        "mime_type": EML,
        "acl": acl,
        "metadata": metadata or {},
    }
    query = f"?connector={connector}" if connector else ""
    resp = client.post(f"/v1/documents{query}", json={"documents": [doc]}, headers=_auth(token))
    assert resp.status_code == 202, resp.text
    return wait_job(client, token, resp.json()["job_id"])


def _search(client: TestClient, token: str, query: str, filters: dict | None = None) -> list[dict]:
    body = {"query": query, "top_k": 10, "mode": "lexical", "filters": filters or {}}
    resp = client.post("/v1/retrieve", json=body, headers=_auth(token))
    assert resp.status_code == 200, resp.text
    return resp.json()["results"]


def _live(db_url: str, tenant: str) -> dict[str, tuple[int | None, str | None]]:
    """external id -> (version, owning connector) of the tenant's live documents."""
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT external_id, current_version, connector FROM documents"
            " WHERE tenant_id = %s AND state = 'active'",
            (tenant,),
        ).fetchall()
    return {str(ext): (version, owner) for ext, version, owner in rows}


def test_pushed_message_attachments_are_documents_with_its_lifecycle(
    full_client: TestClient, db_url: str
) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:reader")
    docx = office_factory.docx_bytes()  # one file for both pushes: a DOCX records when it was written
    job = _push(full_client, ingest, "plan.eml", _message(docx=docx), {"principals": ["user:reader"]}, "mail")
    assert job["state"] == "succeeded" and not job["errors"], job
    (item,) = job["warnings"]
    assert "attachment_skipped: bundle.zip (application/zip, unsupported type)" in item["warnings"]
    live = _live(db_url, "acme")
    assert set(live) == {"plan.eml", "plan.eml#attachment=1", "plan.eml#attachment=2"}
    # Attachments have the message's owner: another connector can neither push nor delete them.
    assert {owner for _version, owner in live.values()} == {"mail"}

    docx_hit = _search(full_client, reader, "database backups thirty five days")[0]
    assert docx_hit["document_external_id"] == "plan.eml#attachment=1"
    assert docx_hit["title"] == "handbook.docx" and docx_hit["section_path"] == ["Storage", "Backups"]
    assert docx_hit["metadata"]["parent_external_id"] == "plan.eml"
    assert docx_hit["metadata"]["attachment_filename"] == "handbook.docx"
    assert docx_hit["metadata"]["message_subject"] == "Harbour maintenance plan"
    notes_hit = _search(full_client, reader, "harbour crane inspection ninth week")[0]
    assert notes_hit["document_external_id"] == "plan.eml#attachment=2"
    # The message's own chunks hold its body, none of the attachments' text.
    body = [
        r
        for r in _search(full_client, reader, "crane backups winter plan")
        if r["document_external_id"] == "plan.eml"
    ]
    assert body and all("crane" not in r["text"] and "backups" not in r["text"] for r in body)

    other = make_key(db_url, "acme", ["ingest"])
    sneak = full_client.delete("/v1/documents/plan.eml%23attachment=1?connector=other", headers=_auth(other))
    assert sneak.status_code == 409, sneak.text
    doc = {"external_id": "plan.eml#attachment=1", "content_base64": "eA==", "mime_type": "text/plain"}
    resp = full_client.post("/v1/documents?connector=other", json={"documents": [doc]}, headers=_auth(other))
    assert resp.status_code == 422
    assert [r["code"] for r in resp.json()["error"]["rejections"]] == ["owned_by_other_connector"]

    # Re-pushed without the text file: the ZIP becomes number 2, the DOCX stays unchanged.
    job = _push(
        full_client,
        ingest,
        "plan.eml",
        _message(notes=False, docx=docx),
        {"principals": ["user:reader"]},
        "mail",
    )
    assert job["state"] == "succeeded", job
    after = _live(db_url, "acme")
    assert set(after) == {"plan.eml", "plan.eml#attachment=1"}
    assert after["plan.eml#attachment=1"] == live["plan.eml#attachment=1"]  # same version
    assert not any(
        r["document_external_id"] == "plan.eml#attachment=2"
        for r in _search(full_client, reader, "harbour crane inspection ninth week")
    )

    # The message's new ACL reaches its attachment: the reader who lost access sees none.
    resp = full_client.put(
        "/v1/documents/plan.eml/acl?connector=mail", json={"principals": ["user:boss"]}, headers=_auth(ingest)
    )
    assert resp.status_code == 200, resp.text
    assert _search(full_client, reader, "database backups thirty five days harbour") == []
    boss = make_key(db_url, "acme", ["query"], principal="user:boss")
    assert _search(full_client, boss, "database backups thirty five days")[0]["document_external_id"] == (
        "plan.eml#attachment=1"
    )

    # Deleting the message deletes its attachments.
    assert (
        full_client.delete("/v1/documents/plan.eml?connector=mail", headers=_auth(ingest)).status_code == 200
    )
    assert _live(db_url, "acme") == {}
    assert _search(full_client, boss, "database backups thirty five days") == []


def test_attachments_inherit_the_message_metadata_and_acl(full_client: TestClient, db_url: str) -> None:
    """A filter on what the message was pushed with (``--metadata source=share``) finds the
    fact only its attachment holds, for the message's readers and nobody else; the message's
    From/To/Date are the attachment's too, its own keys win; a re-push of the same bytes with
    new metadata re-describes the attachments without a new version."""
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:reader")
    outsider = make_key(db_url, "acme", ["query"], principal="user:outsider")
    acl = {"principals": ["user:reader"]}
    # A pushed key an attachment names itself by is the attachment's, not the message's.
    pushed = {"source": "share", "team": "harbour", "attachment_filename": "pushed.bin"}
    message = _message(docx=office_factory.docx_bytes())  # one DOCX: it records when it was written
    job = _push(full_client, ingest, "share.eml", message, acl, metadata=pushed)
    assert job["state"] == "succeeded" and not job["errors"], job
    query = "harbour crane inspection ninth week"
    for filters in ({"source": ["share"]}, {"metadata": {"team": "harbour"}}):
        hit = _search(full_client, reader, query, filters)[0]
        assert hit["document_external_id"] == "share.eml#attachment=2", filters
        assert _search(full_client, outsider, query, filters) == []
    assert hit["metadata"] == {
        "source": "share",
        "team": "harbour",
        "email_from": "Quay Master <quay@example.org>",
        "email_to": "ops@example.org",
        "email_date": "2026-12-01T09:30:00+00:00",
        "parent_external_id": "share.eml",
        "attachment_filename": "notes.txt",
        "message_subject": "Harbour maintenance plan",
    }
    assert _search(full_client, outsider, query) == []
    versions = _live(db_url, "acme")

    job = _push(full_client, ingest, "share.eml", message, acl, metadata={"source": "archive"})
    assert job["state"] == "succeeded", job
    assert _live(db_url, "acme") == versions  # unchanged bytes: no new version of any
    assert _search(full_client, reader, query, {"source": ["share"]}) == []
    hit = _search(full_client, reader, query, {"source": ["archive"]})[0]
    assert hit["document_external_id"] == "share.eml#attachment=2"
    assert "team" not in hit["metadata"] and hit["metadata"]["email_from"] == "Quay Master <quay@example.org>"


def test_uploaded_message_attachments_are_documents(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:reader")
    resp = full_client.post(
        "/v1/documents:upload",
        headers=_auth(ingest),
        files={"file": ("plan.eml", _message(), EML)},
        data={"external_id": "up.eml", "acl": '{"public": true}'},
    )
    assert resp.status_code == 202, resp.text
    job = wait_job(full_client, ingest, resp.json()["job_id"])
    assert job["state"] == "succeeded", job
    assert any("bundle.zip" in w for w in job["warnings"][0]["warnings"])
    hit = _search(full_client, reader, "harbour crane inspection ninth week")[0]
    assert hit["document_external_id"] == "up.eml#attachment=2"
    assert hit["title"] == "notes.txt" and hit["metadata"]["parent_external_id"] == "up.eml"
    assert set(_live(db_url, "acme")) == {"up.eml", "up.eml#attachment=1", "up.eml#attachment=2"}


def test_erasing_a_message_erases_its_attachments(
    full_client: TestClient, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ragline purge`` of a message is an erasure request for what was made of its bytes:
    its attachment documents are deleted and purged with it, in one audited transaction, and
    their text is in no table afterwards."""
    from cli.main import main
    from core.settings import get_settings
    from tests.integration.api.test_purge import _in_tables

    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:reader")
    assert _push(full_client, ingest, "erase.eml", _message(), {"public": True})["state"] == "succeeded"
    assert set(_live(db_url, "acme")) >= {"erase.eml", "erase.eml#attachment=1", "erase.eml#attachment=2"}
    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        assert main(["purge", "--tenant", "acme", "--external-id", "erase.eml", "--json"]) == 0
    finally:
        get_settings.cache_clear()
    assert not [k for k in _live(db_url, "acme") if k.startswith("erase.eml")]
    assert _search(full_client, reader, "harbour crane inspection ninth week") == []
    with psycopg.connect(db_url) as conn:
        assert _in_tables(conn, "harbour crane inspection") == []
        details = conn.execute(
            "SELECT details FROM audit_log WHERE action = 'document.purge' AND target = 'erase.eml'"
        ).fetchone()
    assert details is not None
    assert details[0]["attachments"] == ["erase.eml#attachment=1", "erase.eml#attachment=2"]
