r"""The harness reproduces the published reference scores of the development collections
(../shared/data/README.md: rank_bm25 BM25 and all-MiniLM-L6-v2 dense, nDCG@10) within 0.02,
running the whole product path: job pipeline, catalog, index version, SearchService."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.settings import Settings
from evaluation import evaluate
from tests.conftest import truncate_all

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REFERENCE = {"cisi": {"lexical": 0.342, "dense": 0.421}, "cranfield": {"lexical": 0.335, "dense": 0.382}}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_scores(name: str, shared_data: Path, pg_url: str, tmp_path: Path, embedder) -> None:
    truncate_all(pg_url)
    # The references tokenize with lower-cased \w+ and a small stoplist, without stemming;
    # ragline's default lexical tokenizer also stems (measured: +0.01 to +0.02 nDCG@10).
    settings = Settings(data_dir=tmp_path, database_url=pg_url, index={"lexical_stem": False})
    report = evaluate(
        settings,
        shared_data / name,
        modes=["bm25", "dense", "hybrid"],
        ks=(10,),
        embedder=embedder,
        use_ray=False,
    )
    scores = {m.mode: m.metrics["ndcg@10"] for m in report.modes}
    assert report.ingest_state == "succeeded" or report.ingest_state == "partially_failed"
    for mode, expected in REFERENCE[name].items():
        assert abs(scores[mode] - expected) <= 0.02, (name, mode, scores[mode], expected)
    # hybrid must not fall more than 0.01 below the better single mode
    assert scores["hybrid"] >= max(scores["lexical"], scores["dense"]) - 0.01, scores
