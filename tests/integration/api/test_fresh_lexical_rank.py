"""A document pushed after the index version was built ranks, by keyword, where it ranks
once a rebuild has folded it into the shards: BM25 uses one set of statistics."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from jobs.rebuild_job import rebuild
from tests import factories
from tests.integration.api.conftest import make_key, push_and_wait, swap_live

pytestmark = pytest.mark.integration

OLD = [
    "Pump pressure drops when the intake valve sticks.",
    "Replace the pump seal every spring.",
    "Valve housing torque settings for the pump room.",
    "Cooling fan schedule for the north hall.",
    "Fan belt tension and alignment.",
    "Intake filter cleaning procedure.",
    "Pressure gauge calibration steps.",
    "North hall access badge rules.",
]


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def test_a_fresh_document_ranks_as_after_a_rebuild(
    full_client: TestClient, db_url: str, tmp_path: Path
) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:r")
    public = {"public": True}
    push_and_wait(
        full_client, ingest, [{"external_id": f"old{i}", "text": t, "acl": public} for i, t in enumerate(OLD)]
    )
    config = factories.rebuild(
        index_root=tmp_path / "indexes", model_name="bundled:all-MiniLM-L6-v2", n_shards=2
    )
    version = rebuild(db_url, config)
    assert swap_live(db_url, full_client, version) == version
    runbook = "Bearing lubrication runbook for the pump gearbox: grease the bearing monthly."
    push_and_wait(full_client, ingest, [{"external_id": "runbook", "text": runbook, "acl": public}])

    def ranking() -> list[tuple[str, float]]:
        body = full_client.post(
            "/v1/retrieve",
            json={"query": "pump bearing lubrication", "mode": "lexical", "top_k": 5, "rerank": False},
            headers=_auth(reader),
        ).json()
        return [(r["document_external_id"], r["stage_scores"]["lexical"]) for r in body["results"]]

    fresh = ranking()  # the runbook sits in the delta segment
    version = rebuild(db_url, config)
    assert swap_live(db_url, full_client, version) == version
    rebuilt = ranking()  # now in a shard
    assert [d for d, _ in fresh] == [d for d, _ in rebuilt]
    assert rebuilt[0][0] == "runbook"
    for (_, a), (_, b) in zip(fresh, rebuilt, strict=True):
        assert a == pytest.approx(b, rel=1e-4)
