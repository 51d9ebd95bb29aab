"""Issue 44: a worker that is alive keeps its job's lease, start-up included, and a process
that lost a job (or never got it) follows it to its end instead of giving up.

The lease is shortened to seconds through the runner's config; the slow start-up is an
embedder factory that sleeps (the model load the first inline batch waits for).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from catalog.principals import ensure_tenant
from core.records import Acl
from index.embedder import Embedder
from jobs.runner import IngestRunner
from tests import factories

pytestmark = pytest.mark.integration

LEASE_S = 2.0


def _job(db_url: str, tenant: str) -> uuid.UUID:
    with psycopg.connect(db_url) as conn:
        ensure_tenant(conn, tenant_id=tenant)
        items = [
            NewItem(
                external_id=f"d{i}",
                mime_type="text/plain",
                payload=f"lease text {i}".encode(),
                acl=Acl((), True),
            )
            for i in range(3)
        ]
        return jobs_repo.create_job(conn, tenant_id=tenant, kind="ingest", items=items)


def _runner(db_url: str, tmp_path: Path, factory: Callable[[], Embedder]) -> IngestRunner:
    config = factories.runner(db_url, tmp_path, use_ray=False, lease_seconds=LEASE_S)
    # Parsing in-process: worker processes would add seconds and say nothing about leases.
    return IngestRunner(replace(config, isolation=replace(config.isolation, enabled=False)), factory)


def test_a_start_up_longer_than_the_lease_keeps_the_job(
    db_url: str, tmp_path: Path, embedder: Embedder
) -> None:
    job_id = _job(db_url, "slow-start")
    starting, started = threading.Event(), threading.Event()

    def slow_model_load() -> Embedder:
        starting.set()
        time.sleep(2.5 * LEASE_S)  # a busy machine starting Ray or loading the model
        started.set()
        return embedder

    runner = _runner(db_url, tmp_path, slow_model_load)
    result: list[str | None] = []
    worker = threading.Thread(target=lambda: result.append(runner.run_job(job_id)))
    worker.start()
    taken: list[uuid.UUID] = []
    try:
        assert starting.wait(timeout=30)
        # A server's runner looks for orphans (leases run out) all through the start-up.
        with psycopg.connect(db_url, autocommit=True) as conn:
            while not started.is_set():
                claimed = jobs_repo.claim_next(conn, owner="server:rival", lease_seconds=LEASE_S)
                if claimed is not None:
                    taken.append(claimed)
                    break
                time.sleep(0.2)
    finally:
        worker.join(timeout=60)
    assert taken == [], "the live worker's job was taken over during its start-up"
    assert result == ["succeeded"]
    with psycopg.connect(db_url) as conn:
        job = jobs_repo.get_job(conn, job_id=job_id)
        assert job is not None and job.documents_done == 3 and job.documents_failed == 0
        assert jobs_repo.lease_owner(conn, job_id=job_id) == runner.owner


def test_a_job_held_elsewhere_is_followed_and_taken_back_when_its_worker_dies(
    db_url: str, tmp_path: Path, embedder: Embedder
) -> None:
    job_id = _job(db_url, "followed")
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert jobs_repo.claim_next(conn, owner="server:other", lease_seconds=LEASE_S) == job_id
    runner = _runner(db_url, tmp_path, lambda: embedder)
    progress: list[tuple[int, int]] = []
    result: list[str] = []
    worker = threading.Thread(
        target=lambda: result.append(
            runner.run_to_end(job_id, lambda d, c: progress.append((d, c)), poll_seconds=0.1)
        )
    )
    worker.start()
    try:
        # The other worker is alive (it renews its lease) and does one item: this process
        # only watches, and reports that item's progress.
        with psycopg.connect(db_url, autocommit=True) as conn:
            deadline = time.monotonic() + 1.5 * LEASE_S
            while time.monotonic() < deadline:
                assert jobs_repo.renew_lease(conn, job_id=job_id, owner="server:other") == "held"
                time.sleep(0.2)
            [first, *_] = jobs_repo.items(conn, job_id=job_id, state="pending")
            with conn.transaction():
                assert jobs_repo.finish_item(conn, job_id=job_id, item_no=first.item_no, state="failed")
            assert worker.is_alive() and result == []
            # ... then dies: its lease runs out and the follower runs the rest itself.
    finally:
        worker.join(timeout=60)
    assert result == ["partially_failed"]
    assert sum(d for d, _ in progress) == 3
    with psycopg.connect(db_url) as conn:
        assert jobs_repo.lease_owner(conn, job_id=job_id) == runner.owner
