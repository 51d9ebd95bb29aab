"""HTTP edges where the answer disagreed with the README and the OpenAPI document: an
oversize body without Content-Length (was 400, is 413), OPTIONS/405 ``Allow`` on paths that
several routes serve (named one route's methods), a body that is not JSON (was 422, is 400),
uploads without ``mime_type`` (was required, is detected) and of a type the server does not
parse (was raw pydantic text as ``invalid_input``, is ``unsupported_type``)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import psycopg
import pymupdf
import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

from tests.integration.api.conftest import make_key

pytestmark = pytest.mark.integration


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def _chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    """A body streamed in chunks: the client sends no Content-Length (chunked encoding)."""
    yield b'{"documents": [{"external_id": "a", "text": "'
    sent = 0
    while sent < total:
        yield b"x" * size
        sent += size
    yield b'"}]}'


@pytest.mark.parametrize(
    ("path", "content_type"),
    [("/v1/documents", "application/json"), ("/v1/documents:upload", "multipart/form-data; boundary=b")],
)
def test_an_oversize_body_without_content_length_is_413(
    foundation_client_shared: TestClient, db_url: str, path: str, content_type: str
) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    settings = foundation_client_shared.app.state.settings  # type: ignore[attr-defined]
    settings.api.max_body_bytes = settings.api.max_upload_bytes = 100_000
    resp = foundation_client_shared.post(
        path, content=_chunks(300_000), headers={**_auth(token), "Content-Type": content_type}
    )
    assert "content-length" not in resp.request.headers
    assert resp.status_code == 413, resp.text
    error = resp.json()["error"]
    assert error["code"] == "payload_too_large" and "100000" in error["message"]
    assert error["request_id"] == resp.headers["x-request-id"]
    # Under the limit, the same streamed body is taken.
    ok = foundation_client_shared.post(
        "/v1/documents", content=_chunks(50_000), headers={**_auth(token), "Content-Type": "application/json"}
    )
    assert ok.status_code == 202, ok.text


def _served_methods(app: FastAPI, path: str) -> set[str]:
    return {
        m
        for r in iter_route_contexts(app.routes)
        if getattr(r, "path_regex", None) is not None and r.methods and r.path_regex.match(path)
        for m in r.methods
    }


def test_allow_names_every_method_of_every_route_at_the_path(foundation_client_shared: TestClient) -> None:
    app: FastAPI = foundation_client_shared.app  # type: ignore[assignment]
    paths = {
        re.sub(r"\{[^}]+\}", "x", r.path) for r in iter_route_contexts(app.routes) if r.methods and r.path
    }
    for path in sorted(paths):
        resp = foundation_client_shared.options(path)
        assert resp.status_code == 405, path
        allow = {m.strip() for m in resp.headers["allow"].split(",")}
        assert allow == _served_methods(app, path), path
        assert resp.json()["error"]["code"] == "method_not_allowed"
    # The five paths that named one route's methods only.
    expected = {
        "/v1/connectors/fs/state": "DELETE, GET, PATCH",
        "/v1/documents/doc/acl": "DELETE, GET, PUT",  # DELETE removes, GET reads, the document "doc/acl"
        "/v1/admin/keys": "GET, POST",
        # GET reaches GET /v1/jobs/{job_id} (a 422: "x:cancel" is no job id), so not a 405.
        "/v1/jobs/x:cancel": "GET, POST",
        "/v1/jobs/x:resume": "GET, POST",
    }
    for path, header in expected.items():
        assert foundation_client_shared.options(path).headers["allow"] == header, path
    assert foundation_client_shared.patch("/v1/admin/keys").headers["allow"] == "GET, POST"


@pytest.mark.parametrize(
    ("path", "role", "body"),
    [
        ("/v1/documents", "ingest", b'{"documents": ['),
        ("/v1/documents", "ingest", b"not json"),
        ("/v1/documents/doc/acl", "ingest", b'{"principals": [}'),
        ("/v1/admin/keys", "admin", b"{'roles': ['query']}"),
    ],
)
def test_a_body_that_is_not_json_is_400(
    foundation_client_shared: TestClient, db_url: str, path: str, role: str, body: bytes
) -> None:
    token = make_key(db_url, "acme", [role])
    method = "PUT" if path.endswith("/acl") else "POST"
    headers = {**_auth(token), "Content-Type": "application/json"}
    resp = foundation_client_shared.request(method, path, content=body, headers=headers)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "bad_request" and "not valid JSON" in error["message"]
    # As the OpenAPI document says (and its example: bad_request).
    op = foundation_client_shared.get("/openapi.json").json()["paths"][
        path.replace("/doc/", "/{external_id}/")
    ]
    example = op[method.lower()]["responses"]["400"]["content"]["application/json"]["example"]
    assert example["error"]["code"] == "bad_request"


def _pdf(text: str) -> bytes:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), text, fontsize=11)
    return doc.tobytes()


def _item_type(db_url: str, job_id: str) -> str:
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT mime_type FROM job_items WHERE job_id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize(
    ("name", "content", "part_type", "expected"),
    [
        ("manual.pdf", _pdf("Blade inspection intervals."), "application/pdf", "application/pdf"),
        ("scan", _pdf("No suffix, no part type."), "application/octet-stream", "application/pdf"),
        ("notes.md", b"# Notes\n\nSome markdown.", "application/octet-stream", "text/markdown"),
        ("page.html", b"<html><title>t</title><p>x</p></html>", "application/octet-stream", "text/html"),
        ("README", "Plain text, déjà vu.".encode(), "application/octet-stream", "text/plain"),
        ("blob", b"plain words", "text/markdown", "text/markdown"),
    ],
)
def test_an_upload_without_mime_type_is_detected(
    foundation_client_shared: TestClient,
    db_url: str,
    name: str,
    content: bytes,
    part_type: str,
    expected: str,
) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    resp = foundation_client_shared.post(
        "/v1/documents:upload",
        headers=_auth(token),
        files={"file": (name, content, part_type)},
        data={"external_id": name, "acl": '{"public": true}'},
    )
    assert resp.status_code == 202, resp.text
    assert _item_type(db_url, resp.json()["job_id"]) == expected


@pytest.mark.parametrize(
    ("fields", "name", "content", "shown"),
    [
        ({"mime_type": "application/msword"}, "a.txt", b"hello", "application/msword"),
        ({}, "report.pages", b"PK\x03\x04" + bytes(200), "vnd.apple.pages"),  # a zip, as Office files
        ({}, "blob", bytes(range(256)) * 4, "cannot tell"),
    ],
)
def test_an_unsupported_upload_type_is_unsupported_type(
    foundation_client_shared: TestClient, db_url: str, fields: dict, name: str, content: bytes, shown: str
) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    upload_dir = foundation_client_shared.app.state.settings.upload_dir  # type: ignore[attr-defined]
    kept = set(upload_dir.glob("*"))  # the module's accepted uploads, queued for no runner
    resp = foundation_client_shared.post(
        "/v1/documents:upload",
        headers=_auth(token),
        files={"file": (name, content, "application/octet-stream")},
        data={"external_id": "x", **fields},
    )
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["code"] == "unsupported_type" and shown in error["message"], error
    assert "validation error" not in error["message"]  # no raw pydantic text
    assert set(upload_dir.glob("*")) == kept  # the refused upload left no file behind


def test_an_unsupported_type_in_a_push_is_its_own_rejection(
    foundation_client_shared: TestClient, db_url: str
) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    docs = [
        {"external_id": "ok", "text": "fine"},
        {"external_id": "doc", "content_base64": "aGVsbG8=", "mime_type": "application/msword"},
    ]
    resp = foundation_client_shared.post("/v1/documents", json={"documents": docs}, headers=_auth(token))
    assert resp.status_code == 202, resp.text
    [rejection] = resp.json()["rejections"]
    assert rejection["code"] == "unsupported_type" and "application/msword" in rejection["message"]
