"""Input classes that reached PostgreSQL or the JSON encoder unchecked (500s, batches lost).

Each named example of issue 23 is pinned here: lone UTF-16 surrogates in titles, external
ids, ACL entries and groups; non-finite numbers (``NaN``, ``Infinity``, ``-Infinity``,
``1e999``) in metadata, on push and on upload; NUL characters in the explain ids, a key's
name, a swap's version id and the quality path; deeply nested upload form fields. Every one
is a 4xx naming the field, and a push keeps its valid documents (the bad one is rejected
alone). Bodies are sent as raw bytes: an HTTP client would refuse to encode them.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.integration.api.conftest import make_key

pytestmark = pytest.mark.integration

SURROGATE = "a\ud800"


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def _raw(body: object, *literals: tuple[str, str]) -> bytes:
    """``body`` as JSON the way a hostile client writes it: ``json.dumps`` escapes a lone
    surrogate as ``\\ud800`` and writes ``NaN``; ``literals`` replace placeholders verbatim
    (``1e999`` has no Python float that dumps to it)."""
    text = json.dumps(body)
    for placeholder, literal in literals:
        text = text.replace(json.dumps(placeholder), literal)
    return text.encode()


def _post_raw(client: TestClient, method: str, path: str, body: bytes, token: str):
    headers = {**_auth(token), "Content-Type": "application/json"}
    return client.request(method, path, content=body, headers=headers)


def _doc(ext: str = "good", **over: object) -> dict:
    doc: dict = {"external_id": ext, "text": "hello world", "acl": {"principals": ["user:u"]}}
    doc.update(over)
    return doc


def _field_named(resp, *names: str) -> None:
    """The answer names the field at fault, in ``details[].loc`` or in the message."""
    error = resp.json()["error"]
    text = json.dumps(error)
    assert all(name in text for name in names), (names, text)
    assert error["request_id"] == resp.headers["x-request-id"]


NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity", "1e999": "1e999"}

BAD_PUSHED = {
    "surrogate_title": (_doc("bad", title=SURROGATE), ()),
    "surrogate_external_id": (_doc(SURROGATE), ()),
    "surrogate_acl": (_doc("bad", acl={"principals": [f"user:{SURROGATE}"]}), ()),
    "surrogate_metadata_value": (_doc("bad", metadata={"team": SURROGATE}), ()),
    "surrogate_text": (_doc("bad", text=f"body {SURROGATE}"), ()),
    "control_title": (_doc("bad", title="Quarterly\x1breport"), ()),
    "control_metadata_value": (_doc("bad", metadata={"team": "sre\x85"}), ()),
    **{
        f"metadata_{name}": (_doc("bad", metadata={"k": "@num@"}), (("@num@", literal),))
        for name, literal in NON_FINITE.items()
    },
}


@pytest.mark.parametrize("case", sorted(BAD_PUSHED))
def test_a_bad_document_is_rejected_alone_and_the_batch_kept(
    foundation_client_shared: TestClient, db_url: str, case: str
) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    bad, literals = BAD_PUSHED[case]
    body = _raw({"documents": [_doc("good"), bad, _doc("good-2")]}, *literals)
    resp = _post_raw(foundation_client_shared, "POST", "/v1/documents", body, token)
    assert resp.status_code == 202, resp.text
    out = resp.json()
    assert out["accepted"] == 2 and out["job_id"], out
    [rejection] = out["rejections"]
    assert (rejection["index"], rejection["code"]) == (1, "invalid_document")
    field = {"surrogate_external_id": "external_id", "surrogate_acl": "acl", "surrogate_text": "text"}
    assert field.get(case, "title" if "title" in case else "metadata") in rejection["message"]
    # The valid documents are stored as queued items of the job, nothing else.
    job = foundation_client_shared.get(f"/v1/jobs/{out['job_id']}", headers=_auth(token)).json()
    assert job["documents"]["total"] == 2


def test_a_push_of_only_bad_documents_is_one_422(foundation_client_shared: TestClient, db_url: str) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    body = _raw({"documents": [_doc(SURROGATE), _doc("x", metadata={"k": float("nan")}), "not-a-document"]})
    resp = _post_raw(foundation_client_shared, "POST", "/v1/documents", body, token)
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["code"] == "all_documents_rejected"
    assert [r["index"] for r in error["rejections"]] == [0, 1, 2]
    # A rejected external id is echoed escaped, never as a string the encoder cannot write.
    assert error["rejections"][0]["external_id"] == "a\\ud800"


# One of each class of control character (Unicode category Cc) in a title: C0, tab, line feed,
# carriage return, escape, DEL, C1 (NEL, CSI). Each was stored as sent, and shown without it.
TITLE_CONTROLS = ["\x01", "\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\x9b"]


@pytest.mark.parametrize("char", TITLE_CONTROLS, ids=[f"U+{ord(c):04X}" for c in TITLE_CONTROLS])
def test_a_control_character_in_a_title_is_a_422_naming_the_field_and_the_character(
    foundation_client_shared: TestClient, db_url: str, char: str
) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    title, code = f"Quarterly{char}report", f"U+{ord(char):04X}"
    body = {"documents": [_doc("doc", title=title)]}
    resp = foundation_client_shared.post("/v1/documents", json=body, headers=_auth(token))
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["code"] == "all_documents_rejected"
    [rejection] = error["rejections"]
    assert "title" in rejection["message"] and code in rejection["message"], rejection
    upload = _upload(foundation_client_shared, token, title=title)
    assert upload.status_code == 422, upload.text
    _field_named(upload, "title", code)


@pytest.mark.parametrize(
    ("method", "path", "body", "role", "field"),
    [
        ("PUT", "/v1/documents/doc/acl", {"principals": [f"user:{SURROGATE}"]}, "ingest", "principals"),
        ("PUT", "/v1/principals/user:bob/groups", {"groups": [f"group:{SURROGATE}"]}, "admin", "groups"),
        ("PATCH", "/v1/connectors/fs/state", {"cursor": SURROGATE}, "ingest", "cursor"),
        ("PATCH", "/v1/connectors/fs/state", {"set_documents": {SURROGATE: "f"}}, "ingest", "set_documents"),
        ("POST", "/v1/admin/keys", {"roles": ["query"], "name": SURROGATE}, "admin", "name"),
        ("POST", "/v1/admin/keys", {"roles": ["query"], "name": "a\x00b"}, "admin", "name"),
        ("POST", "/v1/admin/index/aliases/live:swap", {"version_id": "v\x001"}, "operator", "version_id"),
        ("POST", "/v1/admin/index/aliases/live:swap", {"version_id": SURROGATE}, "operator", "version_id"),
        ("POST", "/v1/admin/index/versions/v%001:quality", None, "admin", "version_id"),
        ("POST", "/v1/admin/index/aliases/li%00ve:swap", {"version_id": "v1"}, "admin", "alias"),
        ("POST", "/v1/admin/keys/k%00:revoke", None, "admin", "key_id"),
        ("GET", "/v1/jobs?state=queued%00", None, "ingest", "state"),
    ],
)
def test_bad_text_in_bodies_and_paths_is_a_422_naming_the_field(
    foundation_client_shared: TestClient,
    db_url: str,
    method: str,
    path: str,
    body: dict | None,
    role: str,
    field: str,
) -> None:
    token = make_key(db_url, "acme", [role])
    resp = _post_raw(foundation_client_shared, method, path, _raw(body) if body is not None else b"", token)
    assert resp.status_code == 422, resp.text
    _field_named(resp, field)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"external_id": "a\x00b", "as_principal": "user:bob"}, "external_id"),
        ({"chunk_id": "c\x00", "as_principal": "user:bob"}, "chunk_id"),
        ({"external_id": SURROGATE, "as_principal": "user:bob"}, "external_id"),
        ({"external_id": "doc", "as_principal": "user:bob", "query": SURROGATE}, "query"),
        ({"external_id": "doc", "as_principal": "user:b\x00ob"}, "as_principal"),
    ],
)
def test_bad_text_in_explain_is_a_422(
    full_client_shared: TestClient, db_url: str, body: dict, field: str
) -> None:
    admin = make_key(db_url, "acme", ["admin"])
    resp = _post_raw(full_client_shared, "POST", "/v1/admin/explain", _raw(body), admin)
    assert resp.status_code == 422, resp.text
    _field_named(resp, field)


def test_bad_text_and_numbers_in_retrieve_are_422(full_client_shared: TestClient, db_url: str) -> None:
    reader = make_key(db_url, "acme", ["query"], principal="user:u")
    for body, literals, field in (
        ({"query": SURROGATE}, (), "query"),
        ({"query": "pumps", "filters": {"source": [SURROGATE]}}, (), "source"),
        ({"query": "pumps", "top_k": "@n@"}, (("@n@", "NaN"),), "top_k"),
        ({"query": "pumps", "max_context_tokens": "@n@"}, (("@n@", "1e999"),), "max_context_tokens"),
    ):
        resp = _post_raw(full_client_shared, "POST", "/v1/retrieve", _raw(body, *literals), reader)
        assert resp.status_code == 422, (body, resp.text)
        _field_named(resp, field)


def _upload(client: TestClient, token: str, **fields: str):
    data = {"external_id": "up"} | fields
    return client.post(
        "/v1/documents:upload",
        headers=_auth(token),
        files={"file": ("a.txt", b"hello", "text/plain")},
        data=data,
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        *[({"metadata": f'{{"k": {literal}}}'}, "metadata") for literal in NON_FINITE.values()],
        ({"metadata": '{"k": "a\\ud800"}'}, "metadata"),
        ({"title": "ti\x00tle"}, "title"),
        ({"external_id": "a\x00b"}, "external_id"),
        ({"acl": '{"principals": ["user:a\\ud800"]}'}, "acl"),
        ({"metadata": "[" * 50_000 + "]" * 50_000}, "metadata"),
        ({"acl": '{"principals": ' + "[" * 50_000 + "]" * 50_000 + "}"}, "acl"),
        ({"acl": "{" * 40_000}, "acl"),
        ({"metadata": "[1, 2]"}, "metadata"),
        ({"acl": '{"public": "yes"}'}, "acl"),
    ],
)
def test_bad_upload_fields_are_a_422_naming_the_field(
    foundation_client_shared: TestClient, db_url: str, fields: dict[str, str], field: str
) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    resp = _upload(foundation_client_shared, token, **fields)
    assert resp.status_code == 422, resp.text
    _field_named(resp, field)


@pytest.mark.parametrize(
    ("path", "body", "role"),
    [
        ("/v1/admin/keys", {"roles": ["query"], "can_delegate": "yes"}, "admin"),
        ("/v1/admin/keys", {"roles": ["query"], "can_delegate": 1}, "admin"),
        ("/v1/admin/keys", {"roles": ["query"], "can_delegate": "true"}, "admin"),
        ("/v1/retrieve", {"query": "pumps", "top_k": "5"}, "query"),
        ("/v1/retrieve", {"query": "pumps", "top_k": 5.0}, "query"),
        ("/v1/retrieve", {"query": "pumps", "rerank": "yes"}, "query"),
        ("/v1/retrieve", {"query": "pumps", "rerank": 1}, "query"),
        ("/v1/retrieve", {"query": "pumps", "max_context_tokens": "400"}, "query"),
        ("/v1/admin/reembed", {"model": "m", "force": "yes"}, "operator"),
        ("/v1/admin/reembed", {"model": "m", "shards": "2"}, "operator"),
        ("/v1/documents/doc/acl", {"principals": [], "public": "true"}, "ingest"),
    ],
)
def test_loose_booleans_and_numbers_are_refused(
    full_client_shared: TestClient, db_url: str, path: str, body: dict, role: str
) -> None:
    token = make_key(db_url, "acme", [role], principal="user:u" if role == "query" else None)
    method = "PUT" if path.endswith("/acl") else "POST"
    resp = full_client_shared.request(method, path, json=body, headers=_auth(token))
    assert resp.status_code == 422, (body, resp.text)
    _field_named(resp, next(k for k in body if k not in ("roles", "query", "model", "principals")))
    if path == "/v1/admin/keys":
        keys = full_client_shared.get("/v1/admin/keys", headers=_auth(token)).json()
        assert not any(k["can_delegate"] for k in keys)  # nothing was created


def test_a_strict_body_still_takes_dates_as_strings(full_client_shared: TestClient, db_url: str) -> None:
    reader = make_key(db_url, "acme", ["query"], principal="user:u")
    body = {"query": "pumps", "top_k": 3, "rerank": False, "filters": {"created_after": "2024-01-01"}}
    resp = full_client_shared.post("/v1/retrieve", json=body, headers=_auth(reader))
    assert resp.status_code == 200, resp.text
