"""The answers to hostile and edge-case requests are the ones ``/openapi.json`` describes:
each status is documented for its operation and each body validates against the documented
schema (schemathesis' own conformance checks, on requests sent as raw bytes).

``{"documents": [{}]}`` used to be schema-valid (``documents`` were any objects) and then
refused with a 422: now the schema says what a document needs (``DocumentIn``, with its
required fields and exactly one body), so the refusal is what the document predicts."""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

import pytest
import schemathesis
from fastapi.testclient import TestClient
from schemathesis.checks import CHECKS, load_all_checks

from tests.integration.api.conftest import make_key

pytestmark = pytest.mark.integration

_CONFORMANCE = {
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
}
S = "a\ud800"


def _json(body: object) -> bytes:
    return json.dumps(body).encode()  # escapes a lone surrogate as \ud800, writes NaN


def _doc(ext: str, **over: object) -> dict:
    return {"external_id": ext, "text": "hello", "acl": {"public": True}} | over


# (method, path template, concrete path, role, JSON body or None, expected status)
CASES = [
    ("POST", "/v1/documents", "/v1/documents", "ingest", {"documents": [{}]}, 422),
    ("POST", "/v1/documents", "/v1/documents", "ingest", {"documents": [_doc("a"), _doc(S)]}, 202),
    (
        "POST",
        "/v1/documents",
        "/v1/documents",
        "ingest",
        {"documents": [_doc("a", metadata={"k": 1e999})]},
        422,
    ),
    ("POST", "/v1/documents", "/v1/documents", "ingest", b'{"documents": [', 400),
    (
        "PUT",
        "/v1/documents/{external_id}/acl",
        "/v1/documents/d/acl",
        "ingest",
        {"principals": [f"user:{S}"]},
        422,
    ),
    (
        "PUT",
        "/v1/principals/{principal_id}/groups",
        "/v1/principals/user:b/groups",
        "admin",
        {"groups": [S]},
        422,
    ),
    ("POST", "/v1/admin/keys", "/v1/admin/keys", "admin", {"roles": ["query"], "can_delegate": "yes"}, 422),
    ("POST", "/v1/admin/keys", "/v1/admin/keys", "admin", {"roles": ["query"], "name": "a\x00"}, 422),
    ("POST", "/v1/admin/keys", "/v1/admin/keys", "admin", {"roles": ["query"]}, 201),
    (
        "POST",
        "/v1/admin/index/aliases/{alias}:swap",
        "/v1/admin/index/aliases/live:swap",
        "operator",
        {"version_id": "v\x00"},
        422,
    ),
    (
        "POST",
        "/v1/admin/index/versions/{version_id}:quality",
        "/v1/admin/index/versions/v%00:quality",
        "admin",
        None,
        422,
    ),
    (
        "POST",
        "/v1/admin/explain",
        "/v1/admin/explain",
        "admin",
        {"chunk_id": "c\x00", "as_principal": "user:b"},
        422,
    ),
    ("POST", "/v1/retrieve", "/v1/retrieve", "query", {"query": "q", "top_k": "5"}, 422),
    ("POST", "/v1/retrieve", "/v1/retrieve", "query", {"query": "q", "rerank": "yes"}, 422),
    ("GET", "/v1/jobs", "/v1/jobs?state=queued%00", "ingest", None, 422),
    ("PATCH", "/v1/connectors/{connector}/state", "/v1/connectors/fs/state", "ingest", {"cursor": S}, 422),
]


@pytest.fixture(scope="module")
def conformance(foundation_client_shared: TestClient):
    """The app's schema and the conformance checks, built once per module."""
    schema = schemathesis.openapi.from_dict(foundation_client_shared.get("/openapi.json").json())
    load_all_checks()
    checks = [c for c in CHECKS.get_all() if c.__name__ in _CONFORMANCE]
    assert len(checks) == len(_CONFORMANCE)
    return schema, checks


@pytest.mark.parametrize(("method", "template", "path", "role", "body", "status"), CASES)
def test_edge_answers_are_the_documented_ones(
    foundation_client_shared: TestClient,
    db_url: str,
    conformance,
    method: str,
    template: str,
    path: str,
    role: str,
    body: object,
    status: int,
) -> None:
    schema, checks = conformance
    token = make_key(db_url, "acme", [role], principal="user:q" if role == "query" else None)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    content = body if isinstance(body, bytes) else (b"" if body is None else _json(body))
    response = foundation_client_shared.request(method, path, content=content, headers=headers)
    assert response.status_code == status, response.text
    case = schema[template][method].Case(path_parameters=_path_parameters(template, path))
    case.validate_response(response, checks=checks, headers=headers)


def _path_parameters(template: str, path: str) -> dict[str, str]:
    pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+?)", re.escape(template))
    found = re.fullmatch(pattern, path.split("?", 1)[0])
    assert found is not None, (template, path)
    return {k: unquote(v) for k, v in found.groupdict().items()}


def test_upload_answers_are_the_documented_ones(
    foundation_client_shared: TestClient,
    db_url: str,
    conformance,
) -> None:
    schema, checks = conformance
    token = make_key(db_url, "acme", ["ingest"])
    headers = {"Authorization": f"Bearer {token}"}
    case = schema["/v1/documents:upload"]["POST"].Case()
    for data, name, status in (
        ({"metadata": "[" * 10_000 + "]" * 10_000}, "a.txt", 422),
        ({"metadata": '{"k": NaN}'}, "a.txt", 422),
        ({"mime_type": "application/msword"}, "a.txt", 422),
        ({}, "a.pages", 422),  # Apple Pages: not parsed
        ({}, "notes", 202),
    ):
        response = foundation_client_shared.post(
            "/v1/documents:upload",
            headers=headers,
            files={"file": (name, b"some words", "application/octet-stream")},
            data={"external_id": "u"} | data,
        )
        assert response.status_code == status, (data, response.text)
        case.validate_response(response, checks=checks, headers=headers)


def test_the_schema_says_what_a_pushed_document_needs(foundation_client_shared: TestClient) -> None:
    spec = foundation_client_shared.get("/openapi.json").json()
    push = spec["components"]["schemas"]["PushRequest"]["properties"]["documents"]
    assert push["items"] == {"$ref": "#/components/schemas/DocumentIn"}
    document = spec["components"]["schemas"]["DocumentIn"]
    assert "external_id" in document["required"] and len(document["oneOf"]) == 2
    upload = spec["paths"]["/v1/documents:upload"]["post"]["requestBody"]["content"]["multipart/form-data"]
    form = spec["components"]["schemas"][upload["schema"]["$ref"].rsplit("/", 1)[1]]
    assert "mime_type" not in form["required"]  # detected when absent
