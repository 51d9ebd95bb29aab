"""``POST /v1/feedback``: stored per tenant with the principal, ACL-checked (an unreadable
chunk is not found, as one that does not exist), audited, query text only when stored."""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import ServiceHook, create_app
from api.services import audit_hook, ingest_hook, search_hook
from tests.integration.api.conftest import full_settings, make_key, wait_job

pytestmark = pytest.mark.integration

DOCS = [
    {
        "external_id": "open",
        "text": "Rotate the signing keys in the vault every ninety days.",
        "acl": {"public": True},
    },
    {
        "external_id": "secret",
        "text": "The vault root token is kept in the signing ceremony safe.",
        "acl": {"principals": ["group:eng"]},
    },
]


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _setup(client: TestClient, db_url: str) -> dict[str, str]:
    ingest = make_key(db_url, "acme", ["ingest"])
    r = client.post("/v1/documents", json={"documents": DOCS}, headers=_auth(ingest))
    assert wait_job(client, ingest, r.json()["job_id"])["state"] == "succeeded"
    admin = make_key(db_url, "acme", ["admin"])
    client.put("/v1/principals/user:eve/groups", json={"groups": ["group:eng"]}, headers=_auth(admin))
    eve = make_key(db_url, "acme", ["query"], principal="user:eve")
    answer = client.post("/v1/retrieve", json={"query": "vault signing"}, headers=_auth(eve)).json()
    chunks = {x["document_external_id"]: x["chunk_id"] for x in answer["results"]}
    assert set(chunks) == {"open", "secret"}
    return {"eve": eve, "request_id": answer["request_id"], **{f"chunk_{k}": v for k, v in chunks.items()}}


def _rows(db_url: str) -> list[tuple]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT tenant_id, principal_id, request_id, chunk_id, grade, query"
            " FROM feedback ORDER BY feedback_id"
        ).fetchall()


def test_feedback_is_stored_acl_checked_tenant_isolated_and_audited(
    full_client: TestClient, db_url: str
) -> None:
    s = _setup(full_client, db_url)
    bob = make_key(db_url, "acme", ["query"], principal="user:bob")  # not in group:eng
    mallory = make_key(db_url, "other", ["query"], principal="user:mallory")

    def send(token: str, **body: object) -> tuple[int, dict]:
        r = full_client.post(
            "/v1/feedback", json={"request_id": s["request_id"], **body}, headers=_auth(token)
        )
        return r.status_code, r.json()

    assert send(s["eve"], chunk_id=s["chunk_secret"], label="relevant") == (
        200,
        {"feedback_id": 1, "grade": 1, "query_stored": False},
    )
    assert send(s["eve"], external_id="open", label=2)[1]["grade"] == 2
    assert send(bob, chunk_id=s["chunk_open"], label="not_relevant")[1]["grade"] == 0
    # Unreadable, other tenant's, unknown: one answer, nothing stored.
    for token, body in (
        (bob, {"chunk_id": s["chunk_secret"]}),
        (bob, {"external_id": "secret"}),
        (mallory, {"chunk_id": s["chunk_open"]}),
        (mallory, {"external_id": "open"}),
        (s["eve"], {"chunk_id": "0" * 16}),
        (s["eve"], {"external_id": "missing"}),
    ):
        status, err = send(token, label="relevant", **body)
        assert (status, err["error"]["code"]) == (404, "not_found"), (body, err)
    assert _rows(db_url) == [
        ("acme", "user:eve", s["request_id"], s["chunk_secret"], 1, None),
        ("acme", "user:eve", s["request_id"], None, 2, None),
        ("acme", "user:bob", s["request_id"], s["chunk_open"], 0, None),
    ]
    with psycopg.connect(db_url) as conn:
        audited = conn.execute(
            "SELECT actor, target, details->>'grade' FROM audit_log"
            " WHERE action = 'feedback.record' ORDER BY seq"
        ).fetchall()
    assert audited == [
        ("user:eve", s["request_id"], "1"),
        ("user:eve", s["request_id"], "2"),
        ("user:bob", s["request_id"], "0"),
    ]
    # A deleted document takes its feedback target with it.
    ingest = make_key(db_url, "acme", ["ingest"])
    assert full_client.delete("/v1/documents/open", headers=_auth(ingest)).status_code == 200
    assert send(s["eve"], external_id="open", label=1)[0] == 404


def test_feedback_as_the_end_user_a_retrieve_was_made_for(full_client: TestClient, db_url: str) -> None:
    """``as_principal`` on feedback follows the retrieve's rules: a delegating key judges for
    its end user (recorded as them, checked against what they read), a tenant admin for any
    principal of its tenant (the console's search-as); any other key is refused, and a chunk
    the named principal cannot read is not found, as for the caller itself."""
    s = _setup(full_client, db_url)
    service = make_key(db_url, "acme", ["query"], principal="service:app", delegate=True)
    admin = make_key(db_url, "acme", ["admin"], principal="user:root")
    plain = make_key(db_url, "acme", ["query"], principal="user:plain")
    outsider = make_key(db_url, "other", ["admin"], principal="user:other-root")

    def send(token: str, as_principal: str, chunk: str) -> int:
        body = {"request_id": s["request_id"], "chunk_id": s[chunk], "label": 3, "as_principal": as_principal}
        return full_client.post("/v1/feedback", json=body, headers=_auth(token)).status_code

    assert send(service, "user:eve", "chunk_secret") == 200  # eve is in group:eng
    assert send(admin, "user:eve", "chunk_open") == 200
    assert send(service, "user:bob", "chunk_secret") == 404  # bob may not read it
    assert send(admin, "user:bob", "chunk_secret") == 404
    assert send(outsider, "user:eve", "chunk_open") == 404  # another tenant's chunk
    assert send(plain, "user:eve", "chunk_open") == 403  # neither delegates nor administers
    assert send(service, "not a principal", "chunk_open") == 422
    rows = _rows(db_url)
    assert [(r[1], r[3], r[4]) for r in rows] == [
        ("user:eve", s["chunk_secret"], 3),
        ("user:eve", s["chunk_open"], 3),
    ]
    with psycopg.connect(db_url) as conn:
        actors = conn.execute(
            "SELECT actor FROM audit_log WHERE action = 'feedback.record' ORDER BY seq"
        ).fetchall()
    assert actors == [("service:app",), ("user:root",)]  # who sent it, not whom it is for


@pytest.mark.parametrize(
    "body",
    [
        {"chunk_id": "abc", "label": "maybe"},
        {"chunk_id": "abc", "label": 4},
        {"chunk_id": "abc", "label": -1},
        {"chunk_id": "abc", "label": "1"},
        {"chunk_id": "abc", "label": True},
        {"chunk_id": "abc", "label": 1.5},
        {"label": "relevant"},
        {"chunk_id": "abc", "external_id": "x", "label": "relevant"},
        {"chunk_id": "abc\u0000", "label": "relevant"},
        {"chunk_id": "abc", "label": "relevant", "extra": 1},
    ],
)
def test_bad_feedback_gets_a_422(full_client: TestClient, db_url: str, body: dict) -> None:
    eve = make_key(db_url, "acme", ["query"], principal="user:eve")
    r = full_client.post("/v1/feedback", json={"request_id": "r1", **body}, headers=_auth(eve))
    assert r.status_code == 422, r.text
    ingest = make_key(db_url, "acme", ["ingest"])
    no_role = full_client.post(
        "/v1/feedback", json={"request_id": "r1", "chunk_id": "a", "label": 1}, headers=_auth(ingest)
    )
    assert no_role.status_code == 403


def test_the_query_is_kept_only_when_query_text_is_stored(db_url: str, tmp_path: Path, embedder) -> None:
    settings = full_settings(db_url, tmp_path, audit={"store_query_text": True})
    hooks: list[ServiceHook] = [
        audit_hook,
        partial(ingest_hook, embedder=embedder),
        partial(search_hook, embedder=embedder),
    ]
    with TestClient(create_app(settings, hooks=hooks)) as client:
        client.app.state.runner.config = dataclasses.replace(client.app.state.runner.config, use_ray=False)  # type: ignore[attr-defined]
        s = _setup(client, db_url)
        client.app.state.observer.audit.flush()  # type: ignore[attr-defined]
        r = client.post(
            "/v1/feedback",
            json={"request_id": s["request_id"], "chunk_id": s["chunk_open"], "label": "relevant"},
            headers=_auth(s["eve"]),
        )
        assert r.status_code == 200 and r.json()["query_stored"] is True, r.text
    assert _rows(db_url)[-1][-1] == "vault signing"
