"""End to end: migrate to the CLS-pooled model through the API (Ray actors) while a writer
pushes, re-versions, re-ACLs and deletes and readers keep querying."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import ServiceHook, create_app
from api.services import ingest_hook, reembed_hook, search_hook
from catalog import indexes
from catalog import reembed as reembed_repo
from core.settings import Settings
from tests.integration.api.conftest import make_key, wait_job
from tests.integration.jobs import reembed_helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _text(i: int, marker: str) -> str:
    return f"{marker} " + " ".join(h.WORDS[(i + j) % len(h.WORDS)] for j in range(30))


@pytest.fixture
def client(db_url: str, tmp_path: Path, embedder, ray_local: None) -> Iterator[TestClient]:
    settings = Settings(
        data_dir=tmp_path,
        database_url=db_url,
        index={"poll_seconds": 0.2, "maintenance_seconds": 0},
        # Two readers keep both cores busy: under SCHED_IDLE (the default) the backfill would
        # wait for idle cycles; this test is about dual writes, so it keeps a nice share.
        reembed={"batch_chunks": 4, "actors": 1, "priority": "nice"},
        # The subject is dual writes, not deadlines: a slow machine's push under the backfill
        # took past the default 10 s (503 deadline_exceeded, CI on 2026-12-02).
        api={"request_timeout_ms": 60_000},
    )
    hooks: list[ServiceHook] = [
        partial(ingest_hook, embedder=embedder),
        partial(search_hook, embedder=embedder),
        reembed_hook,
    ]
    with TestClient(create_app(settings, hooks=hooks)) as c:
        runner = c.app.state.runner  # type: ignore[attr-defined]
        import dataclasses

        runner.config = dataclasses.replace(runner.config, use_ray=False)
        yield c


def test_reembed_under_writes_and_reads(
    client: TestClient, db_url: str, tmp_path: Path, model_variants_dir: dict[str, Path]
) -> None:
    admin = make_key(db_url, "acme", ["admin", "operator"], principal="service:ops")
    reader = make_key(db_url, "acme", ["query"], principal="user:r")
    auth = {"Authorization": f"Bearer {admin}"}
    docs = [{"external_id": f"p{i}", "text": _text(i, f"old{i}"), "acl": {"public": True}} for i in range(8)]
    docs += [
        {"external_id": f"s{i}", "text": _text(i, f"sec{i}"), "acl": {"principals": ["user:r"]}}
        for i in range(8)
    ]
    job = client.post("/v1/documents", json={"documents": docs}, headers=auth).json()
    assert wait_job(client, admin, job["job_id"])["state"] == "succeeded"
    first = h.build_live(db_url, tmp_path / "indexes")
    service = client.app.state.search  # type: ignore[attr-defined]
    with psycopg.connect(db_url) as conn:
        service.watcher.check_alias(conn)
    assert service.state.current.version_id == first

    responses: list[tuple[float, int, dict]] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            t = time.monotonic()
            r = client.post(
                "/v1/retrieve",
                json={"query": "orbit comet nebula", "top_k": 30},
                headers={"Authorization": f"Bearer {reader}"},
            )
            responses.append((t, r.status_code, r.json()))

    readers = [threading.Thread(target=read, daemon=True) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        model = str(model_variants_dir["cls"])
        started = client.post("/v1/admin/reembed", json={"model": model, "index_kind": "flat"}, headers=auth)
        assert started.status_code == 202, started.text
        job_id = started.json()["job_id"]
        gone: dict[str, float] = {}  # external id (or old-version marker) -> acknowledged at
        i, seen_running = 0, False
        acked_at: list[float] = []  # wall-clock acknowledgement of each push
        while True:
            state = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
            seen_running |= state["state"] == "running" and state["documents"]["total"] > 0
            if state["state"] not in ("queued", "running") and i >= 4:
                break
            if i < 8:
                pushed = client.post(
                    "/v1/documents",
                    json={
                        "documents": [
                            {"external_id": f"n{i}", "text": _text(i, f"new{i}"), "acl": {"public": True}},
                            {"external_id": f"p{i}", "text": _text(i, f"ver{i}"), "acl": {"public": True}},
                        ]
                    },
                    headers=auth,
                ).json()
                assert wait_job(client, admin, pushed["job_id"])["state"] == "succeeded"
                acked_at.append(time.time())
                gone[f"old{i}"] = time.monotonic()  # p{i}'s first version is superseded
                r = client.put(f"/v1/documents/s{i}/acl", json={"principals": ["user:other"]}, headers=auth)
                assert r.status_code == 200
                gone[f"sec{i}"] = time.monotonic()
                if i % 2:
                    assert client.delete(f"/v1/documents/n{i - 1}", headers=auth).status_code == 200
                    gone[f"new{i - 1}"] = time.monotonic()
            i += 1
            time.sleep(0.2)
        assert state["state"] == "succeeded", state
        # The writes must have landed while the migration ran (dual write is what is under test):
        # compare the pushes' acknowledgements with the job's own start and end (same clock), which
        # does not depend on a poll catching it in the running state.
        began = datetime.fromisoformat(state["started_at"]).timestamp()
        ended = datetime.fromisoformat(state["finished_at"]).timestamp()
        during = [t for t in acked_at if began <= t <= ended]
        assert during, (seen_running, began, ended, acked_at)
        assert state["report"]["gate"]["passed"]
        target = state["report"]["swapped"]["to"]
        with psycopg.connect(db_url) as conn:
            service.watcher.check_alias(conn)
        deadline = time.monotonic() + 30
        while service.state.current.version_id != target and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # readers on the new version
    finally:  # a failed assertion must not leave the readers running
        stop.set()
    for t in readers:
        t.join()

    with psycopg.connect(db_url) as conn:
        models = {v.version_id: v.embedding_model for v in indexes.list_versions(conn)}
        live_rows = {
            r[0]
            for r in conn.execute(
                "SELECT c.chunk_row FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
                " AND d.current_version = c.version AND d.state = 'active' WHERE c.level = 0"
            )
        }
        assert reembed_repo.missing_count(conn, model=model) == 0
        assert indexes.resolve_alias(conn, alias="live").version_id == target  # type: ignore[union-attr]
    snap = service.state.current
    assert snap.version_id == target and snap.model == model
    indexed = {int(r) for held in snap.shard_rows for r in held if int(r) in live_rows}
    served = indexed | {int(r) for r in snap.delta.rows}
    assert served == live_rows  # exactly the live chunks, those written during the backfill too
    assert {int(r) for r in snap.delta.rows} <= live_rows

    assert responses and all(code == 200 for _, code, _ in responses), {c for _, c, _ in responses}
    versions = {body["index_version"] for _, _, body in responses}
    assert {first, target} <= versions
    for began, _, body in responses:
        assert body["embedding_model"] == models[body["index_version"]]
        for result in body["results"]:
            marker = result["text"].split()[0]
            assert not (marker in gone and began > gone[marker]), f"{marker} came back after it was hidden"
