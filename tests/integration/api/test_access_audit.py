"""Key, group and erasure writes record one audit entry of one shape whichever adapter ran
them: ``ragline keys create|revoke`` and the console's ``/v1/admin/keys`` call the same
operation (``services.access``), so their entries differ only in who acted and ``via``; a
refused write (another tenant's key, a grant above the caller's roles) records nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from authz.api_keys import create_key
from catalog import audit
from catalog import documents as docs_repo
from catalog.principals import ensure_tenant
from cli.main import main
from cli.output import operator
from core.settings import get_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(db_url: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The CLI on the test's catalog (the API client's too)."""
    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path / "cli-data"))
    get_settings.cache_clear()
    yield db_url
    get_settings.cache_clear()


def _seed_key(db_url: str, tenant: str, roles: list[str], principal: str) -> str:
    with psycopg.connect(db_url) as conn:
        return create_key(conn, tenant_id=tenant, roles=roles, principal_id=principal).token


def _entries(db_url: str, action: str) -> list[audit.AuditRow]:
    with psycopg.connect(db_url) as conn:
        return sorted(audit.entries(conn, action=action), key=lambda r: r.seq)


def _without_via(details: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in details.items() if k != "via"}


def test_cli_and_console_key_writes_record_the_same_entry(
    foundation_client: TestClient, cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = {"Authorization": f"Bearer {_seed_key(cli_env, 'acme', ['admin'], 'user:root')}"}
    made = foundation_client.post(
        "/v1/admin/keys",
        json={"roles": ["query"], "principal_id": "user:ann", "can_delegate": True},
        headers=admin,
    )
    assert made.status_code == 201, made.text
    console_key = made.json()["key"]["key_id"]
    assert foundation_client.post(f"/v1/admin/keys/{console_key}:revoke", headers=admin).status_code == 200

    argv = ["keys", "create", "--tenant", "acme", "--role", "query", "--principal", "user:ann", "--delegate"]
    assert main(argv) == 0
    cli_key = capsys.readouterr().out.strip().split("_")[1]
    assert main(["keys", "revoke", cli_key]) == 0
    assert capsys.readouterr().out.strip() == "revoked"

    created = _entries(cli_env, "api_key.create")
    assert [(r.target, r.actor, r.details["via"]) for r in created] == [
        (console_key, "user:root", "console"),
        (cli_key, operator(), "cli"),
    ]
    assert {r.tenant_id for r in created} == {"acme"}
    assert [_without_via(r.details) for r in created] == [
        {"roles": ["query"], "principal": "user:ann", "delegate": True}
    ] * 2
    revoked = _entries(cli_env, "api_key.revoke")
    assert [(r.target, r.actor, r.tenant_id, r.details) for r in revoked] == [
        (console_key, "user:root", "acme", {"via": "console"}),
        (cli_key, operator(), "acme", {"via": "cli"}),
    ]

    # a second revoke finds no active key, and records nothing more
    assert main(["keys", "revoke", cli_key]) == 1
    assert capsys.readouterr().out.strip() == "no such active key"
    again = foundation_client.post(f"/v1/admin/keys/{console_key}:revoke", headers=admin)
    assert again.status_code == 404
    assert len(_entries(cli_env, "api_key.revoke")) == 2


def test_refused_key_writes_change_and_record_nothing(foundation_client: TestClient, db_url: str) -> None:
    acme = {"Authorization": f"Bearer {_seed_key(db_url, 'acme', ['admin'], 'user:root')}"}
    globex = {"Authorization": f"Bearer {_seed_key(db_url, 'globex', ['admin'], 'user:gadmin')}"}
    made = foundation_client.post("/v1/admin/keys", json={"roles": ["query"]}, headers=acme)
    assert made.status_code == 201, made.text
    key_id = made.json()["key"]["key_id"]

    # another tenant's key looks absent to globex's admin, and stays active
    refused = foundation_client.post(f"/v1/admin/keys/{key_id}:revoke", headers=globex)
    assert refused.status_code == 404
    listed = foundation_client.get("/v1/admin/keys", headers=acme).json()
    assert {k["key_id"]: k["state"] for k in listed}[key_id] == "active"
    # a tenant admin cannot mint an operator key
    denied = foundation_client.post("/v1/admin/keys", json={"roles": ["operator"]}, headers=acme)
    assert denied.status_code == 403
    assert _entries(db_url, "api_key.revoke") == []
    assert [r.target for r in _entries(db_url, "api_key.create")] == [key_id]


def test_group_sync_records_the_sorted_groups_in_the_admins_tenant(
    foundation_client: TestClient, db_url: str
) -> None:
    admin = {"Authorization": f"Bearer {_seed_key(db_url, 'acme', ['admin'], 'user:root')}"}
    body = {"groups": ["group:z", "group:a", "group:z"]}
    resp = foundation_client.put("/v1/principals/user:ann/groups", json=body, headers=admin)
    assert resp.status_code == 200
    assert resp.json() == {"principal": "user:ann", "groups": ["group:a", "group:z"]}
    bad = foundation_client.put("/v1/principals/nobody/groups", json=body, headers=admin)
    assert bad.status_code == 422
    [entry] = _entries(db_url, "principal.groups")
    assert (entry.actor, entry.tenant_id, entry.target) == ("user:root", "acme", "user:ann")
    assert entry.details == {"groups": ["group:a", "group:z"], "via": "api"}


def test_cli_purge_records_its_counts_via_the_cli(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    with psycopg.connect(cli_env) as conn:
        ensure_tenant(conn, tenant_id="acme")
        docs_repo.lock_for_write(conn, tenant_id="acme", external_id="memo", mime_type="text/plain")
    argv = ["purge", "--tenant", "acme", "--external-id", "memo", "--no-rebuild", "--json"]
    assert main(argv) == 0
    assert '"rebuilt": null' in capsys.readouterr().out
    [entry] = _entries(cli_env, "document.purge")
    assert (entry.actor, entry.tenant_id, entry.target) == (operator(), "acme", "memo")
    assert entry.details["via"] == "cli"
    assert set(entry.details) == audit.ACTIONS["document.purge"].details
