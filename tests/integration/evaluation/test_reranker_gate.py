"""``ragline reranker gate`` through the real pipeline, catalog, index version, SearchService
and cross-encoders loaded by path (no mock of any of them).

The judged set is ``ragline tune``'s (``test_tune.write_collection``): 16 queries on which the
hybrid first stage already ranks every relevant document first (nDCG@10 1.0 without a
reranker), so a reranker can only keep that or lose it. Two real CrossEncoder folders, built
from the bundled MiniLM in a second each, no training:
- "random-rr": its freshly initialised relevance head (seeded): its scores mean nothing, so
  blended with the first stage it moves relevant documents down: it fails and stays off;
- "neutral-rr": the same with the head zeroed: one score for every passage, so the blend
  keeps the fused order: no worse, it passes (the rule is "no worse", not "better").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from catalog.audit import entries
from core.settings import RerankSettings, Settings
from evaluation.harness import EVAL_ALIAS, EVAL_READER
from evaluation.reranker_gate import gate
from retrieve.service import RetrieveRequest, SearchService
from services.caller import Caller
from services.rerankers import tenant_rerankers, turn_off
from tests.integration.evaluation.test_tune import TOPICS, write_collection
from wiring import build_search_service

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CALLER = Caller("operator:test", "cli")


@dataclass(frozen=True)
class Models:
    random: Path
    neutral: Path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    import torch
    from sentence_transformers import CrossEncoder

    from rerank.training import default_base

    root = tmp_path_factory.mktemp("rerankers")
    torch.manual_seed(7)
    model = CrossEncoder(default_base(), num_labels=1, max_length=64, device="cpu")
    model.save(str(root / "random-rr"))
    head = model.model.classifier
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
    model.save(str(root / "neutral-rr"))
    return Models(root / "random-rr", root / "neutral-rr")


def _rows(url: str) -> dict[str, tuple[str | None, bool]]:
    with psycopg.connect(url) as conn:
        return {
            r.tenant_id: (Path(r.model).name if r.model else None, r.enabled) for r in tenant_rerankers(conn)
        }


def _ask(service: SearchService, tenant: str, rerank: bool | None = None):
    acl = AclFilter(tenant_id=tenant, readers=frozenset({EVAL_READER}))
    query = f"{TOPICS[0][0]}"
    return service.retrieve(RetrieveRequest(query=query, top_k=10, max_context_tokens=0, rerank=rerank), acl)


def test_a_failed_gate_stays_off_and_a_passed_one_reranks_its_tenant_only(
    db_url: str, tmp_path: Path, embedder, models: Models
) -> None:
    collection = write_collection(tmp_path / "tokens")
    # The server has a reranker of its own (the random one): a tenant whose gate failed must
    # not fall back to it, and a tenant with a passed gate uses its own instead.
    settings = Settings(
        data_dir=tmp_path / "data", database_url=db_url, rerank=RerankSettings(model=str(models.random))
    )

    failed = gate(
        settings, "tb", CALLER, model=models.random, dataset=collection, embedder=embedder, use_ray=False
    )
    assert failed.queries == len(TOPICS) and failed.ndcg_without == pytest.approx(1.0)
    assert failed.ndcg_with < failed.ndcg_without and failed.interval[0] < 0, failed
    assert not failed.passed and not failed.enabled and failed.unreranked_queries == 0
    passed = gate(
        settings, "ta", CALLER, model=models.neutral, dataset=collection, embedder=embedder, use_ray=False
    )
    assert passed.passed and passed.enabled, passed
    assert passed.ndcg_with == passed.ndcg_without and passed.interval == (0.0, 0.0)
    assert _rows(db_url) == {"ta": ("neutral-rr", True), "tb": ("random-rr", False)}
    with psycopg.connect(db_url) as conn:
        audit = {e.tenant_id: e.details for e in entries(conn, action="reranker.gate")}
    assert audit["tb"]["passed"] is False and audit["tb"]["enabled"] is False
    assert audit["tb"]["ndcg_difference"] == failed.ndcg_difference and audit["tb"]["queries"] == len(TOPICS)
    assert audit["ta"]["enabled"] is True and audit["ta"]["interval"] == [0.0, 0.0]

    pool = ConnectionPool(db_url, min_size=1, max_size=2, open=True)
    service, close = build_search_service(settings, pool, embedder, alias=EVAL_ALIAS, watch=False)
    try:
        on = _ask(service, "ta")
        assert on.reranker == "neutral-rr" and "rerank" in on.timings_ms
        assert all("rerank" in r.stage_scores for r in on.results)
        for rerank in (None, True):  # the failed gate's tenant: no rerank, even when asked
            off = _ask(service, "tb", rerank)
            assert off.reranker is None and "rerank" not in off.timings_ms
            assert not any("rerank" in r.stage_scores for r in off.results)
        assert _ask(service, "tb", True).degraded == [
            {"stage": "rerank", "reason": "the tenant's reranker is off (ragline reranker gate)"}
        ]
        assert _ask(service, "ta", False).reranker is None  # the request's own "rerank": false
        # What ``ragline eval``'s hybrid+rerank mode asks before it runs.
        assert service.rerank_choice("ta").name == "neutral-rr"
        assert service.rerank_choice("tb", True).scorer is None

        # Turned off: the next retrieve of this node sees it (the 'reranker' change).
        with psycopg.connect(db_url) as conn:
            turn_off(conn, CALLER, tenant_id="ta")
        assert _ask(service, "ta").reranker is None
    finally:
        close()
        pool.close()
    assert _rows(db_url)["ta"] == ("neutral-rr", False)


def test_a_reranker_that_cannot_finish_in_the_budget_is_refused_with_its_latency(
    db_url: str, tmp_path: Path, embedder, models: Models
) -> None:
    # Issue 44: a model slower than the budget leaves every "with" answer in the fused order, so
    # nDCG is unchanged and the quality rule alone passed it. A 1 ms budget makes the neutral
    # model (which passes above at the default budget) that model on any machine.
    collection = write_collection(tmp_path / "tokens")
    settings = Settings(data_dir=tmp_path / "data", database_url=db_url, rerank=RerankSettings(budget_ms=1))
    report = gate(
        settings, "ts", CALLER, model=models.neutral, dataset=collection, embedder=embedder, use_ray=False
    )
    assert report.ndcg_with == report.ndcg_without and report.interval == (0.0, 0.0)
    assert report.unreranked_queries == len(TOPICS)
    assert not report.passed and not report.enabled, report
    lat = report.latency
    assert lat is not None and (lat.budget_ms, lat.queries, lat.reranked, lat.reranked_share) == (
        1, len(TOPICS), 0, 0.0,
    )  # fmt: skip
    assert lat.p95_ms >= lat.p50_ms >= 1.0  # each query waited out the budget
    assert report.refused[0].startswith(f"only 0 of {len(TOPICS)} judged queries were reranked")
    assert all(q["rerank_ms"] >= 1.0 for q in report.per_query)
    assert _rows(db_url) == {"ts": ("neutral-rr", False)}
    with psycopg.connect(db_url) as conn:
        (entry,) = entries(conn, action="reranker.gate")
    assert entry.details["enabled"] is False and entry.details["refused"] == report.refused
    assert entry.details["latency"]["reranked_share"] == 0.0
