"""Every write path leaves its audit entry, and one action has one shape whichever path wrote
it: the API (over HTTP), the console's admin routes, a connector (the kit's Syncer) and the
CLI (``ragline ...`` in this process), all against one real server and catalog."""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from catalog import audit
from catalog import jobs as jobs_repo
from catalog import principals as principals_repo
from catalog.audit import ACTIONS, AuditRow
from cli.connect import FsConnector
from cli.main import main
from core.settings import get_settings
from ragline_client import Client, Syncer
from tests.integration.client.conftest import LiveServer

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(live_server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI on the server's catalog and data dir (its index versions are the server's)."""
    monkeypatch.setenv("RAGLINE_DATABASE_URL", live_server.db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RAGLINE_EMBEDDING_BACKEND", "torch")  # no ONNX export per test
    monkeypatch.setenv("RAGLINE_EMBEDDING_DEVICE", "cpu")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _entries(db_url: str) -> list[AuditRow]:
    with psycopg.connect(db_url) as conn:
        return [r for r in audit.entries(conn, limit=10_000) if r.action != "retrieve"]


def _doc(external_id: str, text: str) -> dict:
    return {
        "external_id": external_id,
        "content_base64": base64.b64encode(text.encode()).decode(),
        "mime_type": "text/plain",
        "acl": {"public": True},
    }


def _api_writes(server: LiveServer, ingest: str, admin: str) -> None:
    def call(method: str, path: str, key: str, **kw: object) -> httpx.Response:
        r = httpx.request(method, server.url + path, headers={"Authorization": f"Bearer {key}"}, **kw)  # type: ignore[arg-type]
        assert r.status_code < 300, (method, path, r.status_code, r.text)
        return r

    job = call("POST", "/v1/documents", ingest, json={"documents": [_doc("a", "Alpha text.")]}).json()
    upload = call(
        "POST",
        "/v1/documents:upload",
        ingest,
        files={"file": ("b.txt", b"Bravo text.")},
        data={"external_id": "b", "mime_type": "text/plain", "acl": '{"public": true}'},
    ).json()
    _wait_idle(server, job["job_id"])
    _wait_idle(server, upload["job_id"])
    call("PUT", "/v1/documents/a/acl", ingest, json={"principals": ["user:ann"], "public": False})
    call("DELETE", "/v1/documents/b", ingest)
    call("PUT", "/v1/principals/user:ann/groups", admin, json={"groups": ["group:eng"]})
    call("PATCH", "/v1/connectors/api-conn/state", ingest, json={"cursor": "c1"})
    call("DELETE", "/v1/connectors/api-conn/state", ingest)
    # a queued job nobody has claimed (no such tenant job is running): cancel, then resume
    other = server.key("ingest", tenant="other")
    queued = _queued(server.db_url, "other")
    call("POST", f"/v1/jobs/{queued}:cancel", other)
    call("POST", f"/v1/jobs/{queued}:resume", other)
    _wait_idle(server, str(queued))


def _queued(db_url: str, tenant: str) -> uuid.UUID:
    """A job no runner was told about (nobody wakes the server's runner for it)."""
    with psycopg.connect(db_url) as conn:
        principals_repo.ensure_tenant(conn, tenant_id=tenant)
        item = jobs_repo.NewItem(external_id="late", mime_type="text/plain", payload=b"A late memo.")
        return jobs_repo.create_job(conn, tenant_id=tenant, kind="ingest", items=[item])


def _wait_idle(server: LiveServer, job_id: str) -> None:
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with psycopg.connect(server.db_url) as conn:
            job = jobs_repo.get_job(conn, job_id=uuid.UUID(job_id))
        if job is not None and job.state not in ("queued", "running"):
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish")


def _console_writes(server: LiveServer, admin: str, version: str) -> None:
    def call(method: str, path: str, **kw: object) -> httpx.Response:
        headers = {"Authorization": f"Bearer {admin}"}
        r = httpx.request(method, server.url + path, headers=headers, timeout=60, **kw)  # type: ignore[arg-type]
        assert r.status_code < 300, (method, path, r.status_code, r.text)
        return r

    key = call("POST", "/v1/admin/keys", json={"roles": ["query"], "principal_id": "user:ann"}).json()
    call("POST", f"/v1/admin/keys/{key['key']['key_id']}:revoke")
    call("POST", "/v1/admin/index/aliases/live:swap", json={"version_id": version})
    call("POST", "/v1/admin/index/aliases/live:rollback")
    call("POST", "/v1/admin/index:gc")
    call("POST", "/v1/admin/retrieve", json={"query": "alpha", "as_principal": "user:ann"})


def _cli_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    docs = tmp_path / "cli-docs"
    docs.mkdir()
    (docs / "c.md").write_text("# Charlie\n\nCharlie text.")
    assert main(["ingest", str(docs), "--tenant", "acme", "--public", "--no-ray"]) == 0
    assert main(["index", "rebuild", "--swap", "live"]) == 0
    assert main(["index", "rebuild"]) == 0
    out = capsys.readouterr().out
    second = out.strip().splitlines()[-1].removeprefix("built ")
    assert main(["index", "swap", "--alias", "live", "--version", second]) == 0
    assert main(["index", "rebuild"]) == 0  # unaliased: the GC deletes it
    assert main(["index", "gc", "--grace-seconds", "0"]) == 0
    assert "deleted " in capsys.readouterr().out
    assert main(["keys", "create", "--tenant", "acme", "--role", "query", "--principal", "user:bob"]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["keys", "revoke", token.split("_")[1]]) == 0
    assert main(["schedule", "add", "--cron", "0 3 * * 0", "--job", "rebuild"]) == 0
    schedule_id = re.search(r"schedule (\d+):", capsys.readouterr().out).group(1)  # type: ignore[union-attr]
    assert main(["schedule", "remove", schedule_id]) == 0
    queued = _queued(str(get_settings().database_url), "third")
    assert main(["jobs", "cancel", str(queued)]) == 0
    # a job whose worker died (held by another owner): `jobs resume` takes it over and runs it
    orphan = _queued(str(get_settings().database_url), "fourth")
    with psycopg.connect(str(get_settings().database_url)) as conn:
        assert jobs_repo.claim_job(conn, job_id=orphan, owner="dead-worker", lease_seconds=3600)
    assert main(["jobs", "resume", str(orphan)]) == 0
    capsys.readouterr()
    return second


def test_every_write_path_audits_one_shape_per_action(
    live_server: LiveServer, cli_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ingest, admin = live_server.key("ingest"), live_server.key("admin", "operator", principal="user:root")
    _api_writes(live_server, ingest, admin)

    share = tmp_path / "share"
    share.mkdir()
    (share / "d.txt").write_text("Delta text for the connector.")
    (share / "e.txt").write_text("Echo text for the connector.")
    client = Client(live_server.url, ingest)
    connector = FsConnector(share, name="fs-audit", acl_map=None)
    assert Syncer(client, connector).run().pushed == 2
    (share / "e.txt").unlink()
    assert Syncer(client, connector).run().deleted == 1

    second = _cli_writes(tmp_path, capsys)
    with psycopg.connect(live_server.db_url) as conn:
        first = next(
            r.details["from"] for r in audit.entries(conn, action="index.swap") if r.details["to"] == second
        )
    _console_writes(live_server, admin, first)

    entries = _entries(live_server.db_url)
    seen = {(r.action, r.details.get("via")) for r in entries}
    expected = {
        ("ingest.push", "api"),  # push, upload and the connector's pushes
        ("ingest.push", "cli"),
        ("document.acl", "api"),
        ("document.delete", "api"),
        ("principal.groups", "api"),
        ("connector.state", "api"),
        ("connector.reset", "api"),
        ("job.cancel", "api"),
        ("job.resume", "api"),
        ("job.cancel", "cli"),
        ("job.resume", "cli"),
        ("index.rebuild", "cli"),
        ("index.swap", "cli"),
        ("index.swap", "console"),
        ("index.gc", "cli"),
        ("api_key.create", "cli"),
        ("api_key.revoke", "cli"),
        ("api_key.create", "console"),
        ("api_key.revoke", "console"),
        ("schedule.add", "cli"),
        ("schedule.remove", "cli"),
        ("admin.retrieve", None),  # a console search, audited like a retrieve
    }
    assert expected <= seen, sorted(expected - seen)
    by_action: dict[str, set[frozenset[str]]] = {}
    for r in entries:
        if r.action == "schema.migrate":
            continue
        shape = ACTIONS[r.action]
        keys = frozenset(r.details)
        assert shape.details <= keys <= shape.details | shape.optional, (r.action, sorted(keys))
        assert r.actor and r.target, r
        by_action.setdefault(r.action, set()).add(keys - shape.optional)
    assert all(len(shapes) == 1 for shapes in by_action.values()), by_action
    # who: the key's principal over HTTP, the operator's login from the CLI
    actors = {(r.action, r.details["via"]): r.actor for r in entries if "via" in r.details}
    assert actors[("ingest.push", "api")].startswith("service:acme-ingest")
    assert actors[("ingest.push", "cli")].startswith("operator:")
    assert actors[("api_key.revoke", "console")] == "user:root"
    tenants = {r.tenant_id for r in entries if r.action in ("ingest.push", "api_key.revoke")}
    assert None not in tenants
