from __future__ import annotations

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.integration.api.conftest import make_key

pytestmark = pytest.mark.integration


def test_search_fails_closed_when_permission_data_is_unavailable(
    full_client: TestClient, db_url: str
) -> None:
    reader = make_key(db_url, "acme", ["query"], principal="user:u")
    headers = {"Authorization": f"Bearer {reader}"}
    assert full_client.post("/v1/retrieve", json={"query": "anything"}, headers=headers).status_code == 200
    # Fault injection: the catalog tables the ACL filter needs become unreadable.
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE group_members RENAME TO group_members_gone")
        conn.execute("ALTER TABLE catalog_changes RENAME TO catalog_changes_gone")
    try:
        r = full_client.post("/v1/retrieve", json={"query": "anything"}, headers=headers)
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "unavailable"
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE group_members_gone RENAME TO group_members")
            conn.execute("ALTER TABLE catalog_changes_gone RENAME TO catalog_changes")
    assert full_client.post("/v1/retrieve", json={"query": "anything"}, headers=headers).status_code == 200
