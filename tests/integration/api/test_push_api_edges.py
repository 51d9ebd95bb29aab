from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pymupdf
import pytest
from fastapi.testclient import TestClient

from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from tests.integration.api.conftest import make_key, wait_job

pytestmark = pytest.mark.integration


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def _pdf(text: str) -> bytes:
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), text, fontsize=11)
    return doc.tobytes()


def test_upload_is_staged_and_ingested(full_client: TestClient, db_url: str, tmp_path: Path) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:u")
    resp = full_client.post(
        "/v1/documents:upload",
        headers=_auth(ingest),
        files={
            "file": (
                "manual.pdf",
                _pdf("The turbine manual covers blade inspection intervals."),
                "application/pdf",
            )
        },
        data={
            "external_id": "manual",
            "mime_type": "application/pdf",
            "title": "Turbine manual",
            "metadata": json.dumps({"source": "upload"}),
            "acl": json.dumps({"public": True}),
        },
    )
    assert resp.status_code == 202, resp.text
    job = wait_job(full_client, ingest, resp.json()["job_id"])
    assert job["state"] == "succeeded" and job["pages"] == 1
    hits = full_client.post(
        "/v1/retrieve", json={"query": "blade inspection intervals"}, headers=_auth(reader)
    ).json()["results"]
    assert hits[0]["document_external_id"] == "manual" and hits[0]["page_range"] == [1, 1]
    assert hits[0]["metadata"]["source"] == "upload"


def test_upload_limits_and_bad_fields(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    full_client.app.state.settings.api.max_upload_bytes = 2048  # type: ignore[attr-defined]
    big = full_client.post(
        "/v1/documents:upload",
        headers=_auth(ingest),
        files={"file": ("big.txt", b"x" * 10_000, "text/plain")},
        data={"external_id": "big", "mime_type": "text/plain"},
    )
    assert big.status_code == 413 and big.json()["error"]["code"] == "payload_too_large"
    bad = full_client.post(
        "/v1/documents:upload",
        headers=_auth(ingest),
        files={"file": ("a.txt", b"hello", "text/plain")},
        data={"external_id": "a", "mime_type": "application/msword"},
    )
    assert bad.status_code == 422


def test_delegated_queries_use_the_end_users_groups(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    admin = make_key(db_url, "acme", ["admin"])
    app_key = make_key(db_url, "acme", ["query"], principal="service:chatbot", delegate=True)
    plain = make_key(db_url, "acme", ["query"], principal="service:other")
    docs = [
        {
            "external_id": "eng",
            "text": "Deploy checklist for the payments service.",
            "acl": {"principals": ["group:eng"]},
        },
        {
            "external_id": "alice",
            "text": "Alice's private notes on the payments deploy.",
            "acl": {"principals": ["user:alice"]},
        },
    ]
    wait_job(
        full_client,
        ingest,
        full_client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest)).json()["job_id"],
    )
    full_client.put("/v1/principals/user:bob/groups", json={"groups": ["group:eng"]}, headers=_auth(admin))

    def ids(token: str, **body: object) -> set[str]:
        r = full_client.post("/v1/retrieve", json={"query": "payments deploy", **body}, headers=_auth(token))
        assert r.status_code == 200, r.text
        return {x["document_external_id"] for x in r.json()["results"]}

    assert ids(app_key) == set()  # the service itself reads nothing
    assert ids(app_key, as_principal="user:bob") == {"eng"}
    assert ids(app_key, as_principal="user:alice") == {"alice"}
    r = full_client.post(
        "/v1/retrieve", json={"query": "x", "as_principal": "user:bob"}, headers=_auth(plain)
    )
    assert r.status_code == 403
    r = full_client.post(
        "/v1/retrieve", json={"query": "x", "as_principal": "group:eng"}, headers=_auth(app_key)
    )
    assert r.status_code == 422
    # another tenant's key never sees acme's documents, whatever it claims
    other = make_key(db_url, "globex", ["query"], principal="service:g", delegate=True)
    assert ids(other, as_principal="user:bob") == set()


def test_cancel_a_queued_job(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    with psycopg.connect(db_url) as conn:  # queued directly, never submitted to the runner
        job_id = jobs_repo.create_job(
            conn,
            tenant_id="acme",
            kind="ingest",
            items=[NewItem(external_id="q", mime_type="text/plain", payload=b"hi")],
        )
    r = full_client.post(f"/v1/jobs/{job_id}:cancel", headers=_auth(ingest))
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    listed = full_client.get("/v1/jobs?state=cancelled", headers=_auth(ingest)).json()
    assert [j["job_id"] for j in listed] == [str(job_id)]
    assert full_client.get("/v1/jobs?state=bogus", headers=_auth(ingest)).status_code == 422
    other = make_key(db_url, "globex", ["ingest"])
    assert full_client.get(f"/v1/jobs/{job_id}", headers=_auth(other)).status_code == 404


def test_context_budget_and_parent_expansion(full_client: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:u")
    body = "# Glaciers\n\n" + "\n\n".join(
        f"Paragraph {i}: glaciers carve valleys as ice flows downhill under its own weight."
        for i in range(40)
    )
    wait_job(
        full_client,
        ingest,
        full_client.post(
            "/v1/documents",
            json={
                "documents": [
                    {"external_id": "g", "text": body, "mime_type": "text/markdown", "acl": {"public": True}}
                ]
            },
            headers=_auth(ingest),
        ).json()["job_id"],
    )
    for budget in (16, 60, 300):
        for expand in ("none", "parent"):
            r = full_client.post(
                "/v1/retrieve",
                json={
                    "query": "glaciers carve valleys",
                    "top_k": 5,
                    "max_context_tokens": budget,
                    "expand": expand,
                },
                headers=_auth(reader),
            ).json()
            ctx = r["context"]
            assert 0 < ctx["token_count"] <= budget
            for c in ctx["citations"]:
                assert 0 <= c["start"] < c["end"] <= len(ctx["text"])
                assert all(1 <= i <= len(r["results"]) for i in c["results"])
            assert set(r["timings_ms"]) >= {"acl_filter", "embed", "dense", "lexical", "fusion", "packing"}
