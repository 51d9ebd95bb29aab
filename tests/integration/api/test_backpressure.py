"""Back-pressure on pushes: a tenant's small pushes join its queued push job (one job, one
batch, instead of one job each behind the tenant's running one), a push past the tenant's
queue depth is a 429 ``ingest_queue_full`` with ``Retry-After``, and the client waits what
it asks and then gets in."""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from catalog import audit
from catalog import jobs as jobs_repo
from core.settings import Settings
from ragline_client import Client
from testkit.server import app_in_thread
from tests.integration.api.conftest import make_key
from tests.integration.client.conftest import CountingTransport
from wiring import make_runner

pytestmark = pytest.mark.integration


def _doc(external_id: str) -> dict:
    text = f"Document {external_id} about queue depth and back-pressure."
    return {
        "external_id": external_id,
        "content_base64": base64.b64encode(text.encode()).decode(),
        "mime_type": "text/plain",
        "acl": {"public": True},
    }


def _settings(db_url: str, tmp_path: Path, **ingest: object) -> Settings:
    return Settings(data_dir=tmp_path, database_url=db_url, ingest=ingest)


@pytest.fixture
def queue_only(db_url: str, tmp_path: Path) -> Iterator[TestClient]:
    """The API with no runner: pushes stay queued, as behind a tenant's long job."""
    app = create_app(
        _settings(db_url, tmp_path, max_queued_documents=6, queue_retry_after_seconds=7), hooks=[]
    )
    with TestClient(app) as client:
        yield client


def test_small_pushes_join_one_queued_job_and_a_full_queue_is_429(
    queue_only: TestClient, db_url: str, tmp_path: Path, embedder: object
) -> None:
    auth = {"Authorization": f"Bearer {make_key(db_url, 'acme', ['ingest'])}"}
    jobs = [
        queue_only.post("/v1/documents", json={"documents": [_doc(f"d{i}")]}, headers=auth).json()["job_id"]
        for i in range(3)
    ]
    assert len(set(jobs)) == 1  # one job holds the three pushes
    # another principal of the tenant gets its own job (a job's errors are its caller's)
    key = make_key(db_url, "acme", ["ingest"], principal="service:acme-other")
    other_job = queue_only.post(
        "/v1/documents", json={"documents": [_doc("o1")]}, headers={"Authorization": f"Bearer {key}"}
    ).json()["job_id"]
    assert other_job != jobs[0]
    again = queue_only.post("/v1/documents", json={"documents": [_doc("d0")]}, headers=auth)
    assert again.status_code == 202 and again.json()["job_id"] != jobs[0]  # d0 twice: not one job
    with psycopg.connect(db_url) as conn:
        job = jobs_repo.get_job(conn, job_id=uuid.UUID(jobs[0]))
        assert job is not None and job.documents_total == 3
        assert [i.external_id for i in jobs_repo.items(conn, job_id=job.job_id)] == ["d0", "d1", "d2"]
        pushes = audit.entries(conn, action="ingest.push")
    assert sorted(p.details["coalesced"] for p in pushes) == [False, False, False, True, True]

    # 5 documents queued, limit 6: one more fits, two more do not
    full = queue_only.post("/v1/documents", json={"documents": [_doc("e1"), _doc("e2")]}, headers=auth)
    assert full.status_code == 429
    assert full.headers["Retry-After"] == "7" and full.json()["error"]["code"] == "ingest_queue_full"
    assert queue_only.post("/v1/documents", json={"documents": [_doc("e1")]}, headers=auth).status_code == 202
    upload = queue_only.post(
        "/v1/documents:upload",
        files={"file": ("u.txt", b"An uploaded memo.")},
        data={"external_id": "u", "mime_type": "text/plain", "acl": '{"public": true}'},
        headers=auth,
    )
    assert upload.status_code == 429
    other = {"Authorization": f"Bearer {make_key(db_url, 'globex', ['ingest'])}"}
    assert queue_only.post("/v1/documents", json={"documents": [_doc("g")]}, headers=other).status_code == 202

    # the joined job runs as one batch: every document of every push is written
    runner = make_runner(_settings(db_url, tmp_path), db_url, use_ray=False, embedder=embedder)  # type: ignore[arg-type]
    try:
        assert runner.run_job(uuid.UUID(jobs[0])) == "succeeded"
    finally:
        runner.close()
    with psycopg.connect(db_url) as conn:
        done = jobs_repo.get_job(conn, job_id=uuid.UUID(jobs[0]))
        assert done is not None and (done.documents_done, done.documents_failed) == (3, 0)
        ids = {r[0] for r in conn.execute("SELECT external_id FROM documents WHERE tenant_id = 'acme'")}
    assert {"d0", "d1", "d2"} <= ids


def test_without_coalescing_every_push_is_its_own_job(db_url: str, tmp_path: Path) -> None:
    app = create_app(_settings(db_url, tmp_path, coalesce_max_documents=0), hooks=[])
    auth = {"Authorization": f"Bearer {make_key(db_url, 'acme', ['ingest'])}"}
    with TestClient(app) as client:
        jobs = {
            client.post("/v1/documents", json={"documents": [_doc(f"d{i}")]}, headers=auth).json()["job_id"]
            for i in range(3)
        }
    assert len(jobs) == 3


def test_the_client_waits_what_retry_after_asks_then_gets_in(db_url: str, tmp_path: Path) -> None:
    settings = _settings(db_url, tmp_path, max_queued_documents=1, queue_retry_after_seconds=1)
    with app_in_thread(create_app(settings, hooks=[])) as url:
        transport = CountingTransport()
        client = Client(url, make_key(db_url, "acme", ["ingest"]), transport=transport)
        first = client.push([_doc("a")])
        # the queue drains (here: its only job is cancelled) while the client waits
        drain = threading.Timer(0.3, _cancel, args=(db_url, first.job_ids[0]))
        drain.start()
        started = time.monotonic()
        second = client.push([_doc("b")])
        waited = time.monotonic() - started
        drain.join()
    assert second.job_ids and second.job_ids != first.job_ids
    assert transport.sent.count("POST /v1/documents") == 3  # a, b refused, b again
    assert waited >= 0.95  # the retry waited the server's Retry-After, not the short backoff


def _cancel(db_url: str, job_id: str) -> None:
    with psycopg.connect(db_url) as conn:
        jobs_repo.request_cancel(conn, job_id=uuid.UUID(job_id), tenant_id=None)
