"""Lexical statistics are per tenant: another tenant's text never moves a score, whether it
sits in the fresh-writes delta or, after a rebuild, in the same shards."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from jobs.rebuild_job import rebuild
from tests import factories
from tests.integration.api.conftest import make_key, push_and_wait, swap_live

pytestmark = pytest.mark.integration

A_DOCS = [
    "The zqzz999 probe answers from the north relay.",
    "Relay maintenance: check the zqzz999 probe monthly.",
    "North hall badge rules and relay access.",
    "Pump seal replacement schedule.",
]
B_PRIVATE = [f"zqzz999 zqzz999 internal relay note {i}: north probe codes, zqzz999." for i in range(5)]
QUERY = "zqzz999 probe relay north"


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def test_another_tenants_private_text_moves_no_score(
    full_client: TestClient, db_url: str, tmp_path: Path
) -> None:
    a_ingest, b_ingest = make_key(db_url, "tenant-a", ["ingest"]), make_key(db_url, "tenant-b", ["ingest"])
    reader = make_key(db_url, "tenant-a", ["query"], principal="user:r")
    push_and_wait(
        full_client,
        a_ingest,
        [{"external_id": f"a{i}", "text": t, "acl": {"public": True}} for i, t in enumerate(A_DOCS)],
    )
    config = factories.rebuild(index_root=tmp_path / "indexes", n_shards=2)
    version = rebuild(db_url, config)
    assert swap_live(db_url, full_client, version) == version

    def scores(mode: str) -> list[tuple[str, float, dict]]:
        body = full_client.post(
            "/v1/retrieve",
            json={"query": QUERY, "mode": mode, "top_k": 10, "rerank": False},
            headers=_auth(reader),
        ).json()
        return [(r["document_external_id"], r["score"], r["stage_scores"]) for r in body["results"]]

    before = {mode: scores(mode) for mode in ("lexical", "hybrid")}
    assert before["lexical"] and before["lexical"][0][0] in {"a0", "a1"}
    # tenant B pushes private documents full of the same terms: served from the delta
    push_and_wait(
        full_client,
        b_ingest,
        [
            {"external_id": f"b{i}", "text": t, "acl": {"principals": ["user:b"]}}
            for i, t in enumerate(B_PRIVATE)
        ],
    )
    assert {mode: scores(mode) for mode in before} == before  # not by a bit
    # a rebuild folds B's documents into the same shards as A's
    version = rebuild(db_url, config)
    assert swap_live(db_url, full_client, version) == version
    assert scores("lexical") == before["lexical"]
    # A's own text does move A's scores: the statistics are live, not frozen
    push_and_wait(
        full_client, a_ingest, [{"external_id": "a9", "text": "zqzz999 " * 3, "acl": {"public": True}}]
    )
    moved = {d: s for d, s, _ in scores("lexical")}
    assert any(moved[d] != s for d, s, _ in before["lexical"])
