"""Real answers of every route validate against their documented models, with nothing
left over, so the models and what the routes send cannot drift apart."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, TypeAdapter
from starlette import testclient

from api.app import create_app
from api.errors import ErrorBody
from api.schemas import (
    DocumentAclOut,
    DocumentDeletedOut,
    GroupsOut,
    HealthOut,
    JobOut,
    PushResponse,
    ReadyOut,
    RetrieveOut,
)
from core.settings import Settings
from tests.integration.api.conftest import make_key, wait_job

# The TestClient's responses: httpx2's where it is installed (starlette prefers it), else httpx's.
Response = testclient.httpx.Response

pytestmark = pytest.mark.integration

M = TypeVar("M", bound=BaseModel)
MISSING_JOB = "/v1/jobs/00000000-0000-0000-0000-000000000000"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _matches(model: type[M], resp: Response, status: int) -> M:
    """``resp`` has ``status`` and a body that is exactly ``model``: no missing, no extra keys."""
    assert resp.status_code == status, resp.text
    out = model.model_validate(resp.json())
    assert out.model_dump(mode="json", exclude_unset=True) == resp.json()
    return out


def _error(resp: Response, status: int, code: str) -> None:
    assert _matches(ErrorBody, resp, status).error.code == code


def test_foundation_answers_match_their_models(foundation_client_shared: TestClient, db_url: str) -> None:
    client = foundation_client_shared
    _matches(HealthOut, client.get("/healthz"), 200)
    assert _matches(ReadyOut, client.get("/readyz"), 200).status == "ready"
    admin = _auth(make_key(db_url, "acme", ["admin"]))
    groups = client.put(
        "/v1/principals/user:bob/groups", json={"groups": ["group:b", "group:a"]}, headers=admin
    )
    assert _matches(GroupsOut, groups, 200).groups == ["group:a", "group:b"]

    ingest = _auth(make_key(db_url, "acme", ["ingest"]))
    docs = [{"external_id": "a", "text": "alpha"}, {"external_id": "a", "text": "again"}, {"text": "x"}]
    pushed = _matches(
        PushResponse, client.post("/v1/documents", json={"documents": docs}, headers=ingest), 202
    )
    assert pushed.accepted == 1 and [r.index for r in pushed.rejections] == [1, 2]
    job = _matches(JobOut, client.get(f"/v1/jobs/{pushed.job_id}", headers=ingest), 200)
    assert job.documents.total == 1
    listed = client.get("/v1/jobs", headers=ingest)
    assert [j.job_id for j in TypeAdapter(list[JobOut]).validate_python(listed.json())] == [job.job_id]
    assert (
        TypeAdapter(list[JobOut]).dump_python(
            TypeAdapter(list[JobOut]).validate_python(listed.json()), mode="json"
        )
        == listed.json()
    )
    _matches(JobOut, client.post(f"/v1/jobs/{pushed.job_id}:cancel", headers=ingest), 200)


def test_error_answers_match_the_error_body(foundation_client_shared: TestClient, db_url: str) -> None:
    client = foundation_client_shared
    query = _auth(make_key(db_url, "acme", ["query"]))
    ingest = _auth(make_key(db_url, "acme", ["ingest"]))
    _error(client.get("/v1/jobs"), 401, "unauthenticated")
    _error(client.get("/v1/jobs", headers=query), 403, "forbidden")
    _error(client.get(MISSING_JOB, headers=ingest), 404, "not_found")
    _error(client.delete("/v1/documents/nope", headers=ingest), 404, "not_found")
    _error(client.put("/v1/documents/nope/acl", json={"public": True}, headers=ingest), 404, "not_found")
    _error(client.get("/v1/jobs/not-a-uuid", headers=ingest), 422, "invalid_request")
    invalid = client.post("/v1/retrieve", json={"query": "q", "top_k": 0}, headers=query)
    _error(invalid, 422, "invalid_request")
    assert ErrorBody.model_validate(invalid.json()).error.details
    # The foundation runs no search service.
    _error(client.post("/v1/retrieve", json={"query": "q"}, headers=query), 503, "unavailable")


def test_the_size_limit_answers_the_error_body(db_url: str, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url=db_url, api={"max_body_bytes": 1024})
    with TestClient(create_app(settings, hooks=[])) as client:
        token = make_key(db_url, "acme", ["admin"])
        body = {"groups": ["group:" + "x" * 2000]}
        resp = client.put("/v1/principals/user:bob/groups", json=body, headers=_auth(token))
        _error(resp, 413, "payload_too_large")


def test_full_answers_match_their_models(full_client: TestClient, db_url: str) -> None:
    client = full_client
    ingest_key = make_key(db_url, "acme", ["ingest"])
    ingest = _auth(ingest_key)
    reader = _auth(make_key(db_url, "acme", ["query"], principal="user:alice"))
    doc = {
        "external_id": "glaciers",
        "title": "Glaciers",
        "text": "# Ice\n\nGlaciers carve valleys.\n\n## Moraines\n\nMoraines are left where ice melts.",
        "mime_type": "text/markdown",
        "metadata": {"source": "wiki", "year": 2024, "reviewed": True},
        "acl": {"public": True},
    }
    pushed = _matches(
        PushResponse, client.post("/v1/documents", json={"documents": [doc]}, headers=ingest), 202
    )
    assert wait_job(client, ingest_key, str(pushed.job_id))["state"] == "succeeded"
    _matches(JobOut, client.get(f"/v1/jobs/{pushed.job_id}", headers=ingest), 200)
    assert _matches(ReadyOut, client.get("/readyz"), 200).checks.indexes == "ok"
    for body in (
        {"query": "what do glaciers carve?"},
        {"query": "moraines", "expand": "parent", "mode": "lexical"},
    ):
        out = _matches(RetrieveOut, client.post("/v1/retrieve", json=body, headers=reader), 200)
        assert out.results and out.results[0].document_external_id == "glaciers"
        assert out.context.citations
    acl = client.put("/v1/documents/glaciers/acl", json={"principals": ["group:eng"]}, headers=ingest)
    assert _matches(DocumentAclOut, acl, 200).acl.principals == ["group:eng"]
    deleted = _matches(DocumentDeletedOut, client.delete("/v1/documents/glaciers", headers=ingest), 200)
    assert deleted.deleted and deleted.chunks_tombstoned >= 1
