"""``/openapi.json`` describes every answer: a model for each success, the error body for
each documented error status, and the request limits the settings configure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.settings import Settings

pytestmark = pytest.mark.integration

ERROR_REF = "#/components/schemas/ErrorBody"
# Readiness answers 503 with its own body (which check failed), not the error body.
OWN_ERROR_BODY = {("/readyz", "get", "503"): "#/components/schemas/ReadyOut"}
# The error statuses each operation can answer, so each is documented (429: per-key limits;
# 400, 405, 500 and 503: any operation).
_ANY = {"400", "405", "500", "503"}
ERROR_STATUSES = {
    ("/healthz", "get"): _ANY,
    ("/readyz", "get"): {"503"} | _ANY,
    ("/v1/principals/{principal_id}/groups", "put"): {"401", "403", "413", "422", "429"} | _ANY,
    ("/v1/documents", "post"): {"401", "403", "413", "422", "429"} | _ANY,
    ("/v1/documents:upload", "post"): {"401", "403", "413", "422", "429"} | _ANY,
    ("/v1/documents/{external_id}", "delete"): {"401", "403", "404", "409", "422", "429"} | _ANY,
    ("/v1/documents/{external_id}/acl", "put"): {"401", "403", "404", "409", "413", "422", "429"} | _ANY,
    ("/v1/jobs/{job_id}", "get"): {"401", "403", "404", "422", "429"} | _ANY,
    ("/v1/jobs", "get"): {"401", "403", "422", "429"} | _ANY,
    ("/v1/jobs/{job_id}:cancel", "post"): {"401", "403", "404", "422", "429"} | _ANY,
    ("/v1/retrieve", "post"): {"401", "403", "413", "422", "429", "503"} | _ANY,
    ("/v1/chunks/{chunk_id}", "get"): {"401", "403", "404", "422", "429", "503"} | _ANY,
    ("/v1/documents/{external_id}", "get"): {"401", "403", "404", "422", "429", "503"} | _ANY,
    ("/v1/admin/status", "get"): {"401", "403", "429"} | _ANY,
    ("/v1/admin/fusion", "get"): {"401", "403", "429"} | _ANY,
    ("/v1/feedback", "post"): {"401", "403", "404", "413", "422", "429"} | _ANY,
    ("/v1/admin/fusion", "put"): {"401", "403", "413", "422", "429"} | _ANY,
    ("/v1/admin/fusion", "delete"): {"401", "403", "429"} | _ANY,
    ("/v1/me", "get"): {"401", "429"} | _ANY,
    ("/v1/connectors/{connector}/state", "get"): {"401", "403", "422", "429"} | _ANY,
    ("/v1/connectors/{connector}/state", "patch"): {"401", "403", "413", "422", "429"} | _ANY,
    ("/v1/connectors/{connector}/state", "delete"): {"401", "403", "422", "429"} | _ANY,
    ("/v1/jobs/{job_id}:resume", "post"): {"401", "403", "404", "409", "422", "429", "503"} | _ANY,
    ("/v1/admin/retrieve", "post"): {"401", "403", "413", "422", "429", "503"} | _ANY,
    ("/v1/admin/explain", "post"): {"401", "403", "413", "422", "429", "503"} | _ANY,
    ("/v1/admin/principals", "get"): {"401", "403", "429"} | _ANY,
    ("/v1/admin/keys", "get"): {"401", "403", "429"} | _ANY,
    ("/v1/admin/keys", "post"): {"401", "403", "413", "422", "429"} | _ANY,
    ("/v1/admin/keys/{key_id}:revoke", "post"): {"401", "403", "404", "422", "429"} | _ANY,
    ("/v1/admin/index", "get"): {"401", "403", "429"} | _ANY,
    ("/v1/admin/index/aliases/{alias}:swap", "post"): {"401", "403", "404", "409", "413", "422", "429"}
    | _ANY,
    ("/v1/admin/index/aliases/{alias}:rollback", "post"): {"401", "403", "404", "409", "422", "429"} | _ANY,
    ("/v1/admin/index/versions/{version_id}:quality", "post"): {"401", "403", "404", "422", "429"} | _ANY,
    ("/v1/admin/index:gc", "post"): {"401", "403", "429"} | _ANY,
    ("/v1/admin/reembed", "post"): {"401", "403", "409", "422", "429"} | _ANY,
}


def _openapi(tmp_path: Path, db_url: str, **overrides: Any) -> dict[str, Any]:
    settings = Settings(data_dir=tmp_path, database_url=db_url, **overrides)
    # No lifespan needed: the document is built from the routes alone.
    return TestClient(create_app(settings, hooks=[])).get("/openapi.json").json()


def _refs(schema: dict[str, Any]) -> list[str]:
    """The model references of a response schema: the model itself or a list's items."""
    if "$ref" in schema:
        return [schema["$ref"]]
    if schema.get("type") == "array":
        return _refs(schema.get("items", {}))
    return []


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, ops in doc["paths"].items() for method, op in ops.items()]


def test_every_success_answer_references_a_model(tmp_path: Path, db_url: str) -> None:
    doc = _openapi(tmp_path, db_url)
    for path, method, op in _operations(doc):
        ok = {s: r for s, r in op["responses"].items() if s.startswith("2")}
        assert ok, (method, path)
        for status, response in ok.items():
            schema = response["content"]["application/json"]["schema"]
            refs = _refs(schema)
            assert refs, (method, path, status, schema)
            for ref in refs:
                name = ref.rsplit("/", 1)[-1]
                assert doc["components"]["schemas"][name]["properties"], (method, path, name)


def test_every_error_status_references_the_error_body(tmp_path: Path, db_url: str) -> None:
    doc = _openapi(tmp_path, db_url)
    operations = _operations(doc)
    assert {(path, method) for path, method, _ in operations} == set(ERROR_STATUSES)
    for path, method, op in operations:
        errors = {s: r for s, r in op["responses"].items() if not s.startswith("2")}
        assert set(errors) == ERROR_STATUSES[(path, method)], (method, path)
        for status, response in errors.items():
            expected = OWN_ERROR_BODY.get((path, method, status), ERROR_REF)
            schema = response["content"]["application/json"]["schema"]
            assert _refs(schema) == [expected], (method, path, status)
    # FastAPI's own 422 body is never what this API sends.
    assert "HTTPValidationError" not in str(doc["paths"])
    error = doc["components"]["schemas"]["ErrorDetail"]
    assert {"code", "message", "request_id"} <= set(error["required"])


def test_every_model_has_an_example(tmp_path: Path, db_url: str) -> None:
    doc = _openapi(tmp_path, db_url)
    for path, method, op in _operations(doc):
        for response in op["responses"].values():
            name = _refs(response["content"]["application/json"]["schema"])[0].rsplit("/", 1)[-1]
            assert doc["components"]["schemas"][name].get("examples"), (method, path, name)


def test_the_retrieve_request_shows_the_configured_limits(tmp_path: Path, db_url: str) -> None:
    doc = _openapi(
        tmp_path,
        db_url,
        api={"max_top_k": 5, "max_query_chars": 300},
        retrieve={"max_context_tokens": 900, "default_context_tokens": 700},
    )
    body = doc["paths"]["/v1/retrieve"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    props = doc["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]["properties"]
    assert props["top_k"]["maximum"] == 5 and props["top_k"]["default"] == 5
    assert props["query"]["maxLength"] == 300
    assert props["max_context_tokens"]["maximum"] == 900
    assert props["max_context_tokens"]["default"] == 700
    assert "/retrieve" not in doc["paths"]
