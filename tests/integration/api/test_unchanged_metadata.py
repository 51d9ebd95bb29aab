"""An unchanged re-push with new metadata (a renamed file's ``path``, an edited ACL map's
``metadata``) reaches the document without a new version: before the fix the server kept
the old metadata whenever the content hash matched, so ``path`` went stale after a rename."""

from __future__ import annotations

import base64
from collections.abc import Mapping

import pytest
from fastapi.testclient import TestClient

from tests.integration.api.conftest import make_key, wait_job

pytestmark = pytest.mark.integration

_EML = (
    b"From: Ann <ann@example.com>\r\nTo: bob@example.com\r\nSubject: Turbine inspection\r\n"
    b"Date: Tue, 01 Dec 2026 10:00:00 +0000\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    b"The turbine blades need an inspection every four hundred hours.\r\n"
)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _push(client: TestClient, token: str, doc: Mapping[str, object]) -> dict:
    resp = client.post("/v1/documents", json={"documents": [doc]}, headers=_auth(token))
    assert resp.status_code == 202, resp.text
    return wait_job(client, token, resp.json()["job_id"])


def test_unchanged_repush_applies_new_metadata(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:x")
    doc = {
        "external_id": "notes",
        "title": "Notes",
        "text": "Quarterly planning notes about the observatory telescope budget.",
        "metadata": {"path": "old/notes.md", "team": "astro"},
        "acl": {"public": True},
    }
    assert _push(full_client, ingest, doc)["state"] == "succeeded"
    renamed = {**doc, "metadata": {"path": "new/notes.md"}}
    job = _push(full_client, ingest, renamed)
    assert job["documents"]["unchanged"] == 1 and job["chunks"] == 0  # no new version, no embedding

    def hits(**filters: list[str]) -> list[dict]:
        body = {"query": "observatory telescope budget", "mode": "lexical", "filters": {"metadata": filters}}
        resp = full_client.post("/v1/retrieve", json=body, headers=_auth(reader))
        assert resp.status_code == 200, resp.text
        return list(resp.json()["results"])

    found = hits()
    assert found and found[0]["document_external_id"] == "notes"
    assert found[0]["metadata"]["path"] == "new/notes.md" and "team" not in found[0]["metadata"]
    assert hits(path=["new/notes.md"]) and not hits(path=["old/notes.md"]) and not hits(team=["astro"])
    fetched = full_client.get("/v1/documents/notes", headers=_auth(reader))
    assert fetched.status_code == 200, fetched.text  # GET /v1/documents/{id} answers it too
    assert fetched.json()["metadata"]["path"] == "new/notes.md"


def test_the_files_own_metadata_stays_under_the_new(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:x")
    mail = {
        "external_id": "mail-1",
        "content_base64": base64.b64encode(_EML).decode(),
        "mime_type": "message/rfc822",
        "metadata": {"folder": "INBOX"},
        "acl": {"public": True},
    }
    assert _push(full_client, ingest, mail)["state"] == "succeeded"
    moved = _push(full_client, ingest, {**mail, "metadata": {"folder": "Archive"}})
    assert moved["documents"]["unchanged"] == 1
    resp = full_client.post(
        "/v1/retrieve", json={"query": "turbine blades inspection", "mode": "lexical"}, headers=_auth(reader)
    )
    meta = resp.json()["results"][0]["metadata"]
    assert meta["folder"] == "Archive"
    assert meta["email_from"] == "Ann <ann@example.com>"  # parsed from the file, kept
    # The same push again changes nothing (and reads no stored body to find that out).
    again = _push(full_client, ingest, {**mail, "metadata": {"folder": "Archive"}})
    assert again["documents"]["unchanged"] == 1
