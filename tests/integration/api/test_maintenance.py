from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from catalog import indexes
from catalog.maintenance import SCHEDULER_LOCK
from services.maintenance import tick
from tests import factories
from tests.integration.api.conftest import make_key, wait_job

pytestmark = pytest.mark.integration


def _push(client: TestClient, token: str, n: int, start: int) -> None:
    docs = [
        {
            "external_id": f"m{i}",
            "text": f"maintenance document number {i} about topic {i % 3}",
            "acl": {"public": True},
        }
        for i in range(start, start + n)
    ]
    job = client.post("/v1/documents", json={"documents": docs}, headers={"Authorization": f"Bearer {token}"})
    assert wait_job(client, token, job.json()["job_id"])["state"] == "succeeded"


def test_scheduled_rebuild_swap_and_gc(full_client: TestClient, db_url: str, tmp_path: Path) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    config = factories.rebuild(
        index_root=tmp_path / "idx",
        model_name="bundled:all-MiniLM-L6-v2",
        n_shards=2,
        force_kind="flat",
    )
    policy = factories.policy(delta_chunks=3, tombstone_ratio=0.5, gc_grace_seconds=0)
    _push(full_client, ingest, 4, 0)
    first = tick(db_url, config, policy)
    assert first.ran and first.rebuilt and first.reasons == ("no index version yet",)
    assert tick(db_url, config, policy).rebuilt is None  # nothing changed since the build
    _push(full_client, ingest, 2, 10)  # delta of 2 < 3: still nothing to do
    assert tick(db_url, config, policy).rebuilt is None
    _push(full_client, ingest, 2, 20)  # delta of 4 >= 3
    second = tick(db_url, config, policy)
    assert second.rebuilt and any("delta" in r for r in second.reasons)
    for i in range(3):  # tombstone half of the index: ratio >= 0.5 in some shard
        full_client.delete(f"/v1/documents/m{i}", headers={"Authorization": f"Bearer {ingest}"})
    third = tick(db_url, config, policy)
    assert third.rebuilt and any("tombstone" in r for r in third.reasons)
    assert first.rebuilt in third.collected  # neither the alias target nor the rollback target
    assert not (tmp_path / "idx" / first.rebuilt).exists()
    with psycopg.connect(db_url) as conn:
        assert indexes.resolve_alias(conn, alias="live").version_id == third.rebuilt  # type: ignore[union-attr]
        # another replica holds the lock: this one does nothing
        conn.execute("SELECT pg_advisory_lock(%s)", (SCHEDULER_LOCK,))
        assert tick(db_url, config, policy).ran is False
        conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEDULER_LOCK,))
