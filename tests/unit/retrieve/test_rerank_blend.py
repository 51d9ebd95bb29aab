"""The rerank stage blends through ``retrieve.fusion.rrf`` with the configured ``rrf_k``."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Literal

import pytest

from catalog.serving import ChunkDetail
from retrieve.fusion import FusedHit, rerank_fusion
from retrieve.hybrid import StageLog
from retrieve.service import FusionConfig, RerankConfig, SearchConfig, SearchService

# Fused order 10, 20, 30, 40, 50; the reranker orders them 40, 20, 10, 30, 50.
# 40 is (fused 4, rerank 1) and 20 is (2, 2): with k=1, 1/5 + 1/2 = 0.70 beats 2/3;
# with k=60, 1/64 + 1/61 = 0.03202 loses to 2/62 = 0.03226.
FUSED = [
    FusedHit(cid, 1.0 / rank, {"dense": 1.0 / rank}, {"dense": rank})
    for rank, cid in enumerate([10, 20, 30, 40, 50], 1)
]
SCORES = {10: 0.2, 20: 0.8, 30: 0.1, 40: 0.9, 50: 0.05}
ORDER_K1 = [10, 40, 20, 30, 50]
ORDER_K60 = [10, 20, 40, 30, 50]


class FakeScorer:
    def score(self, query: str, passages: Sequence[str], *, timeout_s: float | None = None) -> list[float]:
        return [SCORES[int(p)] for p in passages]


class BrokenScorer:
    def score(self, query: str, passages: Sequence[str], *, timeout_s: float | None = None) -> list[float]:
        raise TimeoutError("over budget")


def _detail(row: int) -> ChunkDetail:
    return ChunkDetail(row, f"c{row}", 1, "doc", None, str(row), 0, 2, None, None, (), {}, None, None, None)


def _service(rrf_k: int, blend: Literal["rrf", "replace"] = "rrf") -> SearchService:
    config = SearchConfig(
        FusionConfig(rrf_k=rrf_k, dense_weight=1.0, lexical_weight=1.0, candidates=50),
        RerankConfig(candidates=50, budget_ms=1500, blend=blend),
    )
    # The rerank stage touches neither the index nor the database.
    return SearchService(
        watcher=SimpleNamespace(state=None),  # type: ignore[arg-type]
        read_pool=None,  # type: ignore[arg-type]
        searcher=None,  # type: ignore[arg-type]
        embedders=None,  # type: ignore[arg-type]
        counter=None,  # type: ignore[arg-type]
        config=config,
        reranker=FakeScorer(),
    )


def _rerank(service: SearchService, scorer: object = None) -> tuple[list[int], StageLog]:
    slog = StageLog()
    ranked = [(f, _detail(f.chunk_id)) for f in FUSED]
    out, outcome = service._rerank(scorer or FakeScorer(), "q", ranked, service.fusion, slog)  # type: ignore[arg-type]
    assert all(d.row == f.chunk_id for f, d in out)  # details stay with their hits
    # the answer names the reranker only when it ordered; a plain TimeoutError is not the
    # budget's RerankTimeout, so it is an error to the tenant's breaker
    assert outcome == ("reranked" if not slog.degraded else "error")
    return [f.chunk_id for f, _ in out], slog


@pytest.mark.parametrize(("k", "order"), [(1, ORDER_K1), (60, ORDER_K60)])
def test_rerank_fusion_order_depends_on_k(k: int, order: list[int]) -> None:
    blended = rerank_fusion(FUSED, [SCORES[f.chunk_id] for f in FUSED], k=k)
    assert [h.chunk_id for h in blended] == order
    top = blended[0]
    assert top.score == pytest.approx(1 / (k + 1) + 1 / (k + 3))
    assert dict(top.stage_scores) == {"dense": 1.0, "rerank": 0.2}
    assert dict(top.stage_ranks) == {"dense": 1}


@pytest.mark.parametrize(("k", "order"), [(1, ORDER_K1), (60, ORDER_K60)])
def test_service_blends_with_the_configured_rrf_k(k: int, order: list[int]) -> None:
    assert _rerank(_service(k))[0] == order


def test_replace_blend_orders_by_the_rerank_score() -> None:
    assert _rerank(_service(1, blend="replace"))[0] == [40, 20, 10, 30, 50]


def test_a_failing_reranker_keeps_the_fused_order() -> None:
    order, slog = _rerank(_service(1), BrokenScorer())
    assert order == [10, 20, 30, 40, 50]
    assert slog.degraded == [{"stage": "rerank", "reason": "TimeoutError: kept the fused order"}]


def test_rerank_fusion_rejects_mismatched_scores() -> None:
    with pytest.raises(ValueError, match="rerank scores"):
        rerank_fusion(FUSED, [0.1], k=60)
