"""One owner of "which model answered": the serving version's model, whatever the settings
name. The retrieve audit, the console search, explain and the status report all name the
model the answer names (``embedding_model``), not the configured one."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import ServiceHook, create_app
from api.services import audit_hook, search_hook
from catalog import indexes
from jobs.rebuild_job import rebuild
from tests import factories
from tests.integration.api.conftest import full_settings, make_key, serving_client, wait_job

pytestmark = pytest.mark.integration

TENANT = "acme"
VERSION_MODEL = "bundled:all-MiniLM-L6-v2"  # what the version is built with (the session's model)
CONFIGURED = "bundled:a-model-this-node-was-configured-with"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _serve_a_version(db_url: str, tmp_path: Path, embedder: Any) -> str:
    """Documents ingested with the version's model, built into a version that ``live`` serves."""
    for client in serving_client(full_settings(db_url, tmp_path), embedder):
        ingest = make_key(db_url, TENANT, ["ingest"])
        docs = [
            {"external_id": "tea", "text": "Green tea is steeped for three minutes.", "acl": {"public": True}}
        ]
        resp = client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest))
        assert wait_job(client, ingest, resp.json()["job_id"])["state"] == "succeeded"
    version = rebuild(db_url, factories.rebuild(index_root=tmp_path / "indexes", model_name=VERSION_MODEL))
    with psycopg.connect(db_url) as conn, conn.transaction():
        indexes.swap_alias(conn, alias="live", version_id=version)
    return version


def _audited_model(db_url: str, action: str, request_id: str) -> str:
    deadline = time.monotonic() + 10.0
    while True:  # retrieves are written in batches, off the request path
        with psycopg.connect(db_url) as conn:
            row = conn.execute(
                "SELECT details->>'model' FROM audit_log WHERE action = %s AND target = %s",
                (action, request_id),
            ).fetchone()
        if row is not None or time.monotonic() > deadline:
            assert row is not None, f"no {action} entry for {request_id}"
            return str(row[0])
        time.sleep(0.05)


def test_the_audit_records_the_model_that_answered_not_the_configured_one(
    db_url: str, tmp_path: Path, embedder: Any
) -> None:
    version = _serve_a_version(db_url, tmp_path, embedder)
    # A node configured with another model name, serving the version built with VERSION_MODEL.
    settings = full_settings(db_url, tmp_path, embedding_model=CONFIGURED)
    hooks: list[ServiceHook] = [audit_hook, partial(search_hook, embedder=embedder)]
    reader = make_key(db_url, TENANT, ["query"], principal="user:bob")
    admin = make_key(db_url, TENANT, ["admin", "operator"], principal="user:root")
    with TestClient(create_app(settings, hooks=hooks)) as client:
        answer = client.post("/v1/retrieve", json={"query": "green tea"}, headers=_auth(reader)).json()
        assert answer["index_version"] == version and answer["results"]
        assert answer["embedding_model"] == VERSION_MODEL
        assert _audited_model(db_url, "retrieve", answer["request_id"]) == VERSION_MODEL

        console = client.post(
            "/v1/admin/retrieve",
            json={"query": "green tea", "as_principal": "user:bob"},
            headers=_auth(admin),
        ).json()
        assert console["model"] == console["embedding_model"] == VERSION_MODEL
        assert _audited_model(db_url, "admin.retrieve", console["request_id"]) == VERSION_MODEL

        why = client.post(
            "/v1/admin/explain", json={"external_id": "tea", "as_principal": "user:bob"}, headers=_auth(admin)
        ).json()
        # Embedded with the serving version's model: not "not_embedded" for the configured one.
        assert why["visible"] and why["reasons"] == [], why

        status = client.get("/v1/admin/status", headers=_auth(admin)).json()
        assert status["model"] == VERSION_MODEL and status["node"]["serving_version"] == version
