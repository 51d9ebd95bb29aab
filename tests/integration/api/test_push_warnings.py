"""A document nobody can read (no ACL principals, not public) is accepted, as before, but
never silently: the push and the upload answer a ``no_readers`` warning for it, described
in the OpenAPI document."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.integration.api.conftest import make_key

pytestmark = pytest.mark.integration


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_push_and_upload_warn_about_documents_nobody_can_read(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    docs = [
        {"external_id": "open", "text": "For everyone.", "acl": {"public": True}},
        {"external_id": "nobody", "text": "For nobody."},
        {"external_id": "bad", "text": "x", "acl": {"principals": ["eng"]}},  # rejected
        {"external_id": "eng", "text": "For engineers.", "acl": {"principals": ["group:eng"]}},
        {"external_id": "empty-acl", "text": "Also for nobody.", "acl": {"principals": [], "public": False}},
    ]
    resp = full_client.post("/v1/documents", headers=_auth(ingest), json={"documents": docs})
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["accepted"] == 4 and [r["index"] for r in body["rejections"]] == [2]
    assert [(w["index"], w["external_id"], w["code"]) for w in body["warnings"]] == [
        (1, "nobody", "no_readers"),
        (4, "empty-acl", "no_readers"),
    ]
    assert "no query key can read" in body["warnings"][0]["message"]

    upload = full_client.post(
        "/v1/documents:upload",
        headers=_auth(ingest),
        files={"file": ("a.txt", b"Uploaded for nobody.", "text/plain")},
        data={"external_id": "up", "mime_type": "text/plain"},
    )
    assert upload.status_code == 202, upload.text
    assert [w["code"] for w in upload.json()["warnings"]] == ["no_readers"]
    readable = full_client.post(
        "/v1/documents:upload",
        headers=_auth(ingest),
        files={"file": ("b.txt", b"Uploaded for all.", "text/plain")},
        data={"external_id": "up2", "mime_type": "text/plain", "acl": json.dumps({"public": True})},
    )
    assert readable.status_code == 202 and readable.json()["warnings"] == []


def test_the_warning_is_in_the_openapi_document(full_client: TestClient) -> None:
    schemas = full_client.get("/openapi.json").json()["components"]["schemas"]
    warnings = schemas["PushResponse"]["properties"]["warnings"]
    assert warnings["items"] == {"$ref": "#/components/schemas/PushWarning"}
    assert set(schemas["PushWarning"]["required"]) == {"index", "external_id", "code", "message"}
