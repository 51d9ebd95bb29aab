"""Defects the fuzz suite found, each pinned: an unloadable model name and NUL characters in
connector state were 500s (PostgreSQL errors); both are 422s now."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.integration.api.conftest import make_key

pytestmark = pytest.mark.integration


def test_an_unloadable_model_is_a_422(full_client: TestClient, db_url: str) -> None:
    admin = make_key(db_url, "acme", ["operator"])
    for model in ("0", "/nonexistent/model-folder"):
        r = full_client.post(
            "/v1/admin/reembed", json={"model": model}, headers={"Authorization": f"Bearer {admin}"}
        )
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "invalid_input" and "cannot load" in r.json()["error"]["message"]


def test_nul_in_connector_state_is_a_422(full_client: TestClient, db_url: str) -> None:
    """Found by the fuzz suite: a NUL in an item key reached PostgreSQL (500)."""
    ingest = make_key(db_url, "acme", ["ingest"])
    for body in ({"set_documents": {"a\x00b": "h"}}, {"set_documents": {"a": "h\x00"}}, {"cursor": "c\x00"}):
        r = full_client.patch(
            "/v1/connectors/fs/state", json=body, headers={"Authorization": f"Bearer {ingest}"}
        )
        assert r.status_code == 422, (body, r.text)
