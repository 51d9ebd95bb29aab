from __future__ import annotations

import gc
import time
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from authz.api_keys import revoke
from core.settings import Settings
from tests.integration.api.conftest import make_key

pytestmark = pytest.mark.integration


def _error(resp) -> dict:
    body = resp.json()
    assert set(body) == {"error"}
    assert {"code", "message", "request_id"} <= set(body["error"])
    return body["error"]


def test_health_and_ready(foundation_client_shared: TestClient) -> None:
    assert foundation_client_shared.get("/healthz").json() == {"status": "ok"}
    ready = foundation_client_shared.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"]["database"] == "ok"
    assert ready.headers["x-request-id"]


def test_request_id_is_echoed(foundation_client_shared: TestClient) -> None:
    resp = foundation_client_shared.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert resp.headers["x-request-id"] == "abc-123"


@pytest.mark.parametrize(
    "header", [None, "Bearer", "Basic abc", "Bearer not-a-key", "Bearer rl_0123456789ab_" + "A" * 43]
)
def test_missing_or_unknown_key_is_401(foundation_client_shared: TestClient, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    resp = foundation_client_shared.put(
        "/v1/principals/user:bob/groups", json={"groups": []}, headers=headers
    )
    assert resp.status_code == 401
    assert _error(resp)["code"] == "unauthenticated"
    assert resp.headers["www-authenticate"] == "Bearer"


def test_wrong_role_is_403_in_the_same_shape(foundation_client_shared: TestClient, db_url: str) -> None:
    token = make_key(db_url, "acme", ["query"])
    resp = foundation_client_shared.put(
        "/v1/principals/user:bob/groups",
        json={"groups": ["group:eng"]},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert resp.status_code == 403
    assert _error(resp)["code"] == "forbidden"


def test_admin_sets_groups_and_revocation_takes_effect_within_a_second(
    foundation_client_shared: TestClient, db_url: str
) -> None:
    token = make_key(db_url, "acme", ["admin"])
    headers = {"Authorization": f"Bearer {token}"}
    resp = foundation_client_shared.put(
        "/v1/principals/user:bob/groups", json={"groups": ["group:eng", "group:eng"]}, headers=headers
    )
    assert resp.status_code == 200
    assert resp.json()["groups"] == ["group:eng"]
    with psycopg.connect(db_url) as conn:
        key_id = token.split("_")[1]
        assert revoke(conn, key_id=key_id)
    time.sleep(1.05)
    resp = foundation_client_shared.put(
        "/v1/principals/user:bob/groups", json={"groups": []}, headers=headers
    )
    assert resp.status_code == 401
    assert "revoked" in _error(resp)["message"]


def test_unknown_fields_are_422(foundation_client_shared: TestClient, db_url: str) -> None:
    token = make_key(db_url, "acme", ["admin"])
    resp = foundation_client_shared.put(
        "/v1/principals/user:bob/groups",
        json={"groups": [], "x": 1},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert resp.status_code == 422
    assert _error(resp)["code"] == "invalid_request"


def test_oversize_body_is_413(foundation_client_shared: TestClient, db_url: str) -> None:
    token = make_key(db_url, "acme", ["admin"])
    body = '{"groups": ["group:' + "x" * (9 * 1024 * 1024) + '"]}'
    resp = foundation_client_shared.put(
        "/v1/principals/user:bob/groups",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert resp.status_code == 413
    assert _error(resp)["code"] == "payload_too_large"


def test_no_plaintext_key_at_rest(db_url: str) -> None:
    token = make_key(db_url, "acme", ["query"])
    secret = token.split("_", 2)[2]
    with psycopg.connect(db_url) as conn:
        dump = conn.execute("SELECT row_to_json(k)::text FROM api_keys k").fetchall()
        audit = conn.execute("SELECT row_to_json(a)::text FROM audit_log a").fetchall()
    assert dump and all(secret not in row[0] and token not in row[0] for row in dump + audit)


@pytest.mark.parametrize("freeze", [True, False])
def test_the_start_up_heap_freeze_follows_its_setting(db_url: str, tmp_path: Path, freeze: bool) -> None:
    """A server freezes its start-up heap by default (core/heap.py) and gives it back at
    shutdown; ``api.freeze_heap=false`` (the suite's setting, RAGLINE_API__FREEZE_HEAP) skips both."""
    settings = Settings(data_dir=tmp_path, database_url=db_url, api={"freeze_heap": freeze})
    assert gc.get_freeze_count() == 0
    with TestClient(create_app(settings, hooks=[])) as client:
        assert client.get("/healthz").status_code == 200
        assert (gc.get_freeze_count() > 0) is freeze
    assert gc.get_freeze_count() == 0


def test_the_suite_builds_its_apps_without_the_freeze(db_url: str, tmp_path: Path) -> None:
    assert Settings(data_dir=tmp_path, database_url=db_url).api.freeze_heap is False
