"""Read commands print a table for people and ``--json`` for scripts; unknown ids exit non-zero."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from authz.api_keys import create_key
from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from catalog.principals import ensure_tenant
from cli.main import main

pytestmark = pytest.mark.integration


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_keys_list_table_and_json_never_show_a_secret(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(cli_env) as conn:
        key = create_key(conn, tenant_id="acme", roles=["query"], principal_id="user:ann", name="ann's key")
    code, table, _ = _run(capsys, "keys", "list")
    assert code == 0
    assert key.key_id in table and "user:ann" in table and "active" in table
    code, out, _ = _run(capsys, "keys", "list", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["key_id"] for r in rows] == [key.key_id]
    assert rows[0]["roles"] == ["query"] and rows[0]["state"] == "active"
    secret = key.token.rsplit("_", 1)[-1]
    assert secret not in out and secret not in table
    assert "key_hash" not in rows[0]


def test_jobs_list_show_and_cancel(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    with psycopg.connect(cli_env) as conn:
        ensure_tenant(conn, tenant_id="acme")
        job_id = jobs_repo.create_job(
            conn, tenant_id="acme", kind="ingest", items=[NewItem("a.txt", "text/plain", payload=b"hello")]
        )
    code, out, _ = _run(capsys, "jobs", "list", "--json")
    listed = json.loads(out)
    assert code == 0 and [j["job_id"] for j in listed] == [str(job_id)]
    assert listed[0]["state"] == "queued" and listed[0]["documents_total"] == 1
    code, table, _ = _run(capsys, "jobs", "list")
    assert code == 0 and str(job_id) in table and "queued" in table
    code, out, _ = _run(capsys, "jobs", "show", str(job_id), "--json")
    shown = json.loads(out)
    assert code == 0 and shown["job_id"] == str(job_id) and shown["state"] == "queued"
    code, text, _ = _run(capsys, "jobs", "show", str(job_id))
    assert code == 0 and f"job {job_id}" in text
    code, out, _ = _run(capsys, "jobs", "cancel", str(job_id))
    assert code == 0 and "cancelled" in out  # a queued job is cancelled at once
    # A job that has ended has nothing to stop: said, with its state, and not a success.
    code, out, err = _run(capsys, "jobs", "cancel", str(job_id))
    assert code == 1 and f"job {job_id} has already ended: cancelled" in err and out == ""
    unknown = uuid.uuid4()
    code, out, err = _run(capsys, "jobs", "cancel", str(unknown))
    assert code == 1 and f"no job {unknown}" in err and "cancel requested" not in out
    code, _, err = _run(capsys, "jobs", "show", str(unknown))
    assert code == 1 and f"no job {unknown}" in err


def test_index_list_and_show(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "index", "list", "--json")
    assert code == 0 and json.loads(out) == []
    code, out, _ = _run(capsys, "index", "list")
    assert code == 0 and "no index versions" in out
    code, _, err = _run(capsys, "index", "show", "v-missing")
    assert code == 1 and "no index version v-missing" in err
    code, out, _ = _run(capsys, "index", "capacity", "--json")
    assert code == 0 and json.loads(out)["n_vectors"] == 0
    code, out, _ = _run(capsys, "index", "capacity", "--shard-servers", "2", "--json")
    assert code == 0 and json.loads(out)["shard_servers"]["n_servers"] == 2
    code, out, _ = _run(capsys, "index", "capacity", "--shard-servers", "2")
    assert code == 0 and "RAM per shard server" in out


def test_keys_create_operator(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--role operator`` makes a deployment operator key in the operator tenant; tenant roles
    still need ``--tenant``."""
    from catalog.principals import get_key

    assert main(["keys", "create", "--role", "operator", "--principal", "service:ops"]) == 0
    token = capsys.readouterr().out.strip()
    with psycopg.connect(cli_env) as conn:
        row = get_key(conn, key_id=token.split("_")[1])
    assert row is not None and row.roles == ("operator",) and row.tenant_id == "operator"
    assert main(["keys", "create", "--role", "admin"]) == 2
    assert "--tenant is required" in capsys.readouterr().err


def test_status_shows_the_fusion_settings_and_each_tenants_defaults(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from catalog.fusion import FusionOverride, set_tenant_defaults

    with psycopg.connect(cli_env) as conn:
        ensure_tenant(conn, tenant_id="acme")
        set_tenant_defaults(
            conn, tenant_id="acme", defaults=FusionOverride(method="convex", dense_weight=0.25), actor="test"
        )
    rc, out, _ = _run(capsys, "status", "--json")
    assert rc == 0
    assert json.loads(out)["fusion"] == [
        {
            "tenant_id": "(settings)",
            "method": "rrf",
            "rrf_k": 60,
            "weights": {"dense": 1.0, "lexical": 1.0},
            "candidates": {"dense": 50, "lexical": 50},
        },
        {
            "tenant_id": "acme",
            "method": "convex",
            "rrf_k": 60,
            "weights": {"dense": 0.25, "lexical": 1.0},
            "candidates": {"dense": 50, "lexical": 50},
        },
    ]
    rc, out, _ = _run(capsys, "status")
    assert rc == 0 and "convex" in out and "dense 0.25, lexical 1" in out
