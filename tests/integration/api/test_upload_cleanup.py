"""Staged uploads do not pile up: each is removed once its item is committed or failed, and
the maintenance tick collects orphans (a crash between staging and the job, a dead job)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from catalog.principals import ensure_tenant
from jobs.staging import collect_orphan_uploads
from tests.integration.api.conftest import make_key, wait_job

pytestmark = pytest.mark.integration


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def _upload(client: TestClient, token: str, ext: str, content: bytes) -> str:
    resp = client.post(
        "/v1/documents:upload",
        headers=_auth(token),
        files={"file": (f"{ext}.txt", content, "text/plain")},
        data={"external_id": ext, "mime_type": "text/plain", "acl": '{"principals": ["user:u"]}'},
    )
    assert resp.status_code == 202, resp.text
    return resp.json()["job_id"]


def test_staged_files_go_when_their_item_ends(full_client: TestClient, db_url: str, tmp_path: Path) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    uploads = full_client.app.state.settings.upload_dir  # type: ignore[attr-defined]
    outcomes = []
    for ext, content in (
        ("a", b"Blade inspection notes."),
        ("a", b"Blade inspection notes."),
        ("b", b"  \n "),
    ):
        job = wait_job(full_client, ingest, _upload(full_client, ingest, ext, content))
        outcomes.append((job["state"], job["documents"]["unchanged"]))
        assert list(uploads.iterdir()) == [], job
    assert outcomes == [("succeeded", 0), ("succeeded", 1), ("failed", 0)]  # new, unchanged, empty


def test_orphans_are_collected_and_live_files_kept(db_url: str, tmp_path: Path) -> None:
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    live, orphan, fresh = uploads / "live", uploads / "orphan", uploads / "fresh"
    for path in (live, orphan, fresh):
        path.write_bytes(b"x")
    old = time.time() - 7200
    for path in (live, orphan):
        os.utime(path, (old, old))
    outside = tmp_path / "user-file.txt"  # a CLI-ingested file: never ours to delete
    outside.write_bytes(b"y")
    os.utime(outside, (old, old))
    with psycopg.connect(db_url, autocommit=True) as conn:
        ensure_tenant(conn, tenant_id="acme")
        jobs_repo.create_job(
            conn,
            tenant_id="acme",
            kind="ingest",
            items=[
                NewItem("l", "text/plain", payload_path=str(live)),
                NewItem("o", "text/plain", payload_path=str(outside)),
            ],
        )
        removed = collect_orphan_uploads(conn, upload_dir=uploads, grace_seconds=3600)
    assert removed == [orphan.name]
    assert sorted(p.name for p in uploads.iterdir()) == ["fresh", "live"] and outside.exists()
