"""Input that used to reach PostgreSQL unchecked (500, whole batch lost) is a 4xx at the edge.

Each case here was a 500 or a silent acceptance before: NUL characters in identifiers and
text fields, year-0 dates, malformed group ids, principals with a trailing newline and
lax booleans deciding access. Every error answer, a 500 included, carries a request id.
"""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.integration.api.conftest import make_key

pytestmark = pytest.mark.integration


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def _doc(ext: str = "ok", **over: object) -> dict:
    doc: dict = {"external_id": ext, "text": "hello world", "acl": {"principals": ["user:u"]}}
    doc.update(over)
    return doc


BAD_DOCUMENTS = {
    "nul_in_acl": _doc("a", acl={"principals": ["user:a\x00b"]}),
    "newline_in_acl": _doc("b", acl={"principals": ["user:alice\n"]}),
    "nul_in_external_id": _doc("c\x00d"),
    "nul_in_title": _doc("e", title="ti\x00tle"),
    "nul_in_metadata": _doc("f", metadata={"team": "s\x00re"}),
    "public_yes": _doc("g", acl={"public": "yes"}),
    "public_on": _doc("h", acl={"public": "on"}),
    "public_one": _doc("i", acl={"public": 1}),
}


@pytest.mark.parametrize("case", sorted(BAD_DOCUMENTS))
def test_a_bad_document_is_rejected_alone(
    foundation_client_shared: TestClient, db_url: str, case: str
) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    resp = foundation_client_shared.post(
        "/v1/documents", json={"documents": [_doc("good"), BAD_DOCUMENTS[case]]}, headers=_auth(token)
    )
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["accepted"] == 1 and body["job_id"]
    assert [(r["index"], r["code"]) for r in body["rejections"]] == [(1, "invalid_document")]


def test_a_push_with_every_document_rejected_is_422(
    foundation_client_shared: TestClient, db_url: str
) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    resp = foundation_client_shared.post(
        "/v1/documents",
        json={"documents": [BAD_DOCUMENTS["nul_in_title"], {"external_id": "x"}]},
        headers=_auth(token),
    )
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["code"] == "all_documents_rejected" and error["request_id"] == resp.headers["x-request-id"]
    assert [r["index"] for r in error["rejections"]] == [0, 1]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("DELETE", "/v1/documents/a%00b", None),
        ("PUT", "/v1/documents/a%00b/acl", {"principals": ["user:u"]}),
        ("PUT", "/v1/documents/ok/acl", {"principals": ["user:u\x00"]}),
        ("PUT", "/v1/documents/ok/acl", {"principals": [], "public": "yes"}),
        ("PUT", "/v1/documents/ok/acl", {"principals": [], "public": 1}),
    ],
)
def test_bad_document_paths_and_acls_are_422(
    foundation_client_shared: TestClient, db_url: str, method: str, path: str, body: dict | None
) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    resp = foundation_client_shared.request(method, path, json=body, headers=_auth(token))
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["request_id"] == resp.headers["x-request-id"]


@pytest.mark.parametrize(
    ("principal", "groups"),
    [
        ("user:bob", ["group:"]),
        ("user:bob", ["group: ops"]),
        ("user:bob", ["group:o\x00ps"]),
        ("user:bob", ["group:ops\n"]),
        ("user:bob%0A", ["group:ops"]),
        ("user:b%00ob", ["group:ops"]),
    ],
)
def test_bad_groups_are_422(
    foundation_client_shared: TestClient, db_url: str, principal: str, groups: list
) -> None:
    token = make_key(db_url, "acme", ["admin"])
    resp = foundation_client_shared.put(
        f"/v1/principals/{principal}/groups", json={"groups": groups}, headers=_auth(token)
    )
    assert resp.status_code == 422, resp.text


def test_principal_ids_are_full_matched() -> None:
    from authz.api_keys import validate_principal_id
    from core.errors import InvalidInputError

    for bad in ("user:alice\n", "user:alice\x00", "group:eng", "user:"):
        with pytest.raises(InvalidInputError):
            validate_principal_id(bad)
    assert validate_principal_id("user:alice") == "user:alice"


def test_405_carries_allow_and_the_shared_body(foundation_client_shared: TestClient) -> None:
    resp = foundation_client_shared.get("/v1/documents")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "POST"
    error = resp.json()["error"]
    assert error["code"] == "method_not_allowed" and error["request_id"] == resp.headers["x-request-id"]


def test_a_500_carries_a_request_id(foundation_client: TestClient) -> None:
    app: FastAPI = foundation_client.app  # type: ignore[assignment]

    def boom() -> None:  # fault injection: a route that fails unexpectedly
        raise RuntimeError("injected")

    app.add_api_route("/test-boom", boom, methods=["GET"])
    resp = foundation_client.get("/test-boom", headers={"X-Request-ID": "rid-500"})
    assert resp.status_code == 500
    assert resp.headers["x-request-id"] == "rid-500"
    assert resp.json() == {
        "error": {"code": "internal_error", "message": "internal error", "request_id": "rid-500"}
    }
    # The connection and the app stay usable afterwards.
    assert foundation_client.get("/healthz").status_code == 200


def test_retrieval_filters_are_checked_and_empty_lists_apply_no_filter(
    full_client: TestClient, db_url: str
) -> None:
    from tests.integration.api.conftest import wait_job

    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:u", delegate=True)
    doc = _doc("runbook", text="Rotate the turbine bearings every spring.", metadata={"team": "sre"})
    job = full_client.post("/v1/documents", json={"documents": [doc]}, headers=_auth(ingest)).json()
    assert wait_job(full_client, ingest, job["job_id"])["state"] == "succeeded"

    def retrieve(**extra: object):
        body = {"query": "turbine bearings", "mode": "lexical", **extra}
        return full_client.post("/v1/retrieve", json=body, headers=_auth(reader))

    for bad in (
        {"filters": {"created_after": "0001-01-01"}},
        {"filters": {"created_before": "9999-12-31T23:59:59"}},
        {"filters": {"source": ["a\x00b"]}},
        {"filters": {"metadata": {"team": "s\x00re"}}},
        {"as_principal": "user:u\n"},
    ):
        resp = retrieve(**bad)
        assert resp.status_code == 422, (bad, resp.text)
        assert resp.json()["error"]["request_id"] == resp.headers["x-request-id"]

    plain = [r["chunk_id"] for r in retrieve().json()["results"]]
    assert plain
    old = retrieve(filters={"created_after": "1000-01-01"}).json()["results"]
    assert [r["chunk_id"] for r in old] == plain
    # One meaning for an empty list: no filter on that field, for metadata keys as for source.
    empties: list[dict[str, object]] = [{"metadata": {"team": []}}, {"source": []}, {"mime_type": []}]
    for empty in empties:
        assert [r["chunk_id"] for r in retrieve(filters=empty).json()["results"]] == plain, empty


def test_binary_content_fails_its_document_only(full_client: TestClient, db_url: str) -> None:
    import base64
    import random

    from tests.integration.api.conftest import wait_job

    ingest = make_key(db_url, "acme", ["ingest"])
    noise = base64.b64encode(random.Random(3).randbytes(64 * 1024)).decode()
    docs = [
        _doc("good", text="Lubricate the gearbox quarterly."),
        {"external_id": "noise", "content_base64": noise, "mime_type": "text/plain", "acl": {"public": True}},
    ]
    resp = full_client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest))
    job = wait_job(full_client, ingest, resp.json()["job_id"])
    assert job["state"] == "partially_failed"
    assert [(e["external_id"], e["code"]) for e in job["errors"]] == [("noise", "binary_content")]


def test_a_database_outage_is_503_with_retry_after(foundation_client: TestClient, db_url: str) -> None:
    from psycopg_pool import ConnectionPool

    token = make_key(db_url, "acme", ["ingest"])
    app: FastAPI = foundation_client.app  # type: ignore[assignment]
    healthy = app.state.pool
    # Fault injection: the write pool points at a port nothing listens on.
    dead = ConnectionPool("postgresql://127.0.0.1:1/none", min_size=0, max_size=1, open=True, timeout=0.5)
    app.state.pool = dead
    try:
        for method, path in (("DELETE", "/v1/documents/x"), ("GET", "/v1/jobs"), ("POST", "/v1/documents")):
            body = {"documents": [_doc("x")]} if method == "POST" else None
            resp = foundation_client.request(method, path, json=body, headers=_auth(token))
            assert resp.status_code == 503, (path, resp.text)
            assert resp.headers["retry-after"] == "1"
            error = resp.json()["error"]
            assert (
                error["code"] == "database_unavailable"
                and error["request_id"] == resp.headers["x-request-id"]
            )
    finally:
        app.state.pool = healthy
        dead.close()
    assert foundation_client.get("/v1/jobs", headers=_auth(token)).status_code == 200  # recovered, no restart
