from __future__ import annotations

import base64

import pytest
from fastapi.testclient import TestClient

from tests.integration.api.conftest import make_key, wait_job

pytestmark = pytest.mark.integration

DOCS = [
    {
        "external_id": "keys",
        "title": "Key rotation",
        "text": "# Rotating signing keys\n\nTo rotate signing keys, create a new key pair in the vault, "
        "publish the public key, then retire the old key after one day.",
        "mime_type": "text/markdown",
        "metadata": {"source": "wiki", "team": "infra"},
        "acl": {"principals": ["group:eng"]},
    },
    {
        "external_id": "lunch",
        "title": "Lunch menu",
        "text": "Monday: soup. Tuesday: pasta with tomato sauce. Wednesday: fish and chips.",
        "metadata": {"source": "intranet"},
        "acl": {"public": True},
    },
    {
        "external_id": "salaries",
        "title": "Salaries",
        "text": "Confidential salary bands for signing bonus and key staff retention.",
        "acl": {"principals": ["user:hr-lead"]},
    },
]


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_push_search_acl_delete(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    alice = make_key(db_url, "acme", ["query"], principal="user:alice")
    admin = make_key(db_url, "acme", ["admin"])
    resp = full_client.post(
        "/v1/documents", json={"documents": DOCS + [{"external_id": "bad"}]}, headers=_auth(ingest)
    )
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["accepted"] == 3 and [r["index"] for r in body["rejections"]] == [3]
    job = wait_job(full_client, ingest, body["job_id"])
    assert job["state"] == "succeeded", job
    assert job["documents"]["done"] == 3 and job["chunks"] >= 3

    def search(q: str, token: str = alice, **extra: object) -> list[str]:
        r = full_client.post("/v1/retrieve", json={"query": q, **extra}, headers=_auth(token))
        assert r.status_code == 200, r.text
        return [x["document_external_id"] for x in r.json()["results"]]

    # alice is in no group yet: only the public document
    assert set(search("how do I rotate signing keys?")) == {"lunch"}
    full_client.put("/v1/principals/user:alice/groups", json={"groups": ["group:eng"]}, headers=_auth(admin))
    hits = search("how do I rotate signing keys?")
    assert hits[0] == "keys" and "salaries" not in hits
    for mode in ("dense", "lexical", "hybrid"):
        assert "salaries" not in search("salary bands signing bonus", mode=mode)
    assert search("rotate keys", filters={"source": ["intranet"]}) == ["lunch"]
    # ACL change: effective from the response on
    r = full_client.put("/v1/documents/keys/acl", json={"principals": ["user:bob"]}, headers=_auth(ingest))
    assert r.status_code == 200
    assert "keys" not in search("how do I rotate signing keys?")
    # delete
    assert full_client.delete("/v1/documents/lunch", headers=_auth(ingest)).status_code == 200
    assert search("soup pasta fish") == []
    assert full_client.delete("/v1/documents/lunch", headers=_auth(ingest)).status_code == 404


def test_reingest_unchanged_and_changed(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:x")
    doc = {
        "external_id": "d1",
        "text": "The quick brown fox jumps over the lazy dog.",
        "acl": {"public": True},
    }
    j1 = wait_job(
        full_client,
        ingest,
        full_client.post("/v1/documents", json={"documents": [doc]}, headers=_auth(ingest)).json()["job_id"],
    )
    j2 = wait_job(
        full_client,
        ingest,
        full_client.post("/v1/documents", json={"documents": [doc]}, headers=_auth(ingest)).json()["job_id"],
    )
    assert j1["state"] == j2["state"] == "succeeded"
    assert j2["documents"]["unchanged"] == 1 and j2["chunks"] == 0
    changed = {**doc, "text": "Completely new content about astronomy and telescopes."}
    wait_job(
        full_client,
        ingest,
        full_client.post("/v1/documents", json={"documents": [changed]}, headers=_auth(ingest)).json()[
            "job_id"
        ],
    )
    r = full_client.post("/v1/retrieve", json={"query": "quick brown fox"}, headers=_auth(reader)).json()
    texts = [x["text"] for x in r["results"]]
    assert texts and all("fox" not in t for t in texts)
    assert "telescopes" in texts[0]


def test_bad_documents_get_their_own_errors(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    docs = [
        {"external_id": "ok", "text": "fine text here"},
        {
            "external_id": "pdf",
            "content_base64": base64.b64encode(b"not a pdf at all \x00\x01").decode(),
            "mime_type": "application/pdf",
        },
        {
            "external_id": "utf",
            "content_base64": base64.b64encode(b"caf\xe9 \xff\xfe ok").decode(),
            "mime_type": "text/plain",
        },
        {"external_id": "empty", "text": "   "},
    ]
    body = full_client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest)).json()
    job = wait_job(full_client, ingest, body["job_id"])
    assert job["state"] == "partially_failed"
    failed = {e["external_id"]: e["code"] for e in job["errors"]}
    assert set(failed) == {"pdf", "empty"}
    assert job["documents"]["done"] == 4 and job["documents"]["failed"] == 2


def test_limits(full_client: TestClient, db_url: str) -> None:
    reader = make_key(db_url, "acme", ["query"])
    for bad in (
        {"query": "x", "top_k": 1000},
        {"query": ""},
        {"query": "x", "nope": 1},
        {"query": "x", "max_context_tokens": 10**6},
        {"query": "x" * 5000},
    ):
        r = full_client.post("/v1/retrieve", json=bad, headers=_auth(reader))
        assert r.status_code == 422, bad
    ingest = make_key(db_url, "acme", ["ingest"])
    r = full_client.post(
        "/v1/documents", json={"documents": [{"external_id": "a", "text": "x"}] * 300}, headers=_auth(ingest)
    )
    assert r.status_code == 422
    r = full_client.post("/v1/retrieve", json={"query": "x"}, headers=_auth(ingest))
    assert r.status_code == 403
