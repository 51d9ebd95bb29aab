"""``ragline reranker gate``: a tenant's reranker goes on only when it does not cost the
tenant ranking quality (issue 22).

The tenant's judged queries (a BEIR collection ingested into it, and/or its relevance
feedback: :func:`evaluation.tuning.judged_queries`, as ``ragline tune`` gathers them) are each
searched twice through the real ``SearchService`` as the principal they belong to: once
unreranked, once with the model reranking the candidates exactly as a request of the tenant
would be (the tenant's fusion, ``[rerank] candidates``, ``blend`` and budget: the one rerank
step of ``/v1/retrieve``). Each query's nDCG@10 is paired; the mean difference gets a 95%
paired bootstrap interval (:func:`evaluation.cv.bootstrap_interval`).

The rule (:func:`passes`): on when the mean difference is >= 0 and the interval's lower
bound is >= -``TOLERANCE`` (0.005): no worse on average, and no plausible loss beyond half a
point of nDCG@10. A weak reranker blended at full weight costs nDCG (``docs/benchmarks.md``,
"Why the mined reranker lowers nDCG"), and a gain the judged queries cannot tell from noise
with a wide interval is not "no worse", so such a model stays off. A model that changes no
ranking (difference 0 everywhere) passes: it is no worse, only slower.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from core.errors import InvalidInputError
from core.ir_metrics import doc_scores_from_chunks, ndcg_at_k
from core.settings import Settings
from evaluation import cv
from evaluation.tuning import JudgedQuery, judged_set
from index.embedder import Embedder
from retrieve.service import RerankChoice, RetrieveRequest, RetrieveResult, SearchService
from services.caller import Caller
from services.rerankers import GateOutcome, record_gate
from wiring import build_search_service
from wiring.search import load_batching_reranker

TOLERANCE = 0.005  # the largest loss of mean nDCG@10 the interval's lower bound may allow
MIN_QUERIES = 5  # fewer: no interval worth the name
RULE = f"mean nDCG@10 difference >= 0 and its 95% interval's lower bound >= -{TOLERANCE}"


def passes(mean_difference: float, interval: tuple[float, float]) -> bool:
    """The gate's rule: no worse on average, and no plausible loss beyond ``TOLERANCE``."""
    return mean_difference >= 0 and interval[0] >= -TOLERANCE


@dataclass(slots=True)
class GateReport:
    tenant: str
    model: str
    sources: list[str]
    queries: int
    top_k: int
    candidates: int  # reranked per query ([rerank] candidates), as served
    blend: str
    ndcg_without: float  # mean nDCG@10, unreranked / reranked
    ndcg_with: float
    ndcg_difference: float
    interval: tuple[float, float]
    passed: bool
    enabled: bool
    forced_off: bool
    rule: str = RULE
    unreranked_queries: int = 0  # "with" answers the reranker did not order (over budget, failed)
    per_query: list[dict[str, Any]] = field(default_factory=list)  # id, without, with
    index_version: str = ""
    seconds: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _ndcg10(result: RetrieveResult, qrels: dict[str, int]) -> float:
    docs = doc_scores_from_chunks([(r.detail.external_id, r.score) for r in result.results])
    return ndcg_at_k(docs, qrels, 10)


def _paired(
    service: SearchService, queries: list[JudgedQuery], choice: RerankChoice, *, tenant: str, top_k: int
) -> tuple[list[tuple[float, float]], int, str]:
    """Each query's nDCG@10 without and with the reranker; how many "with" answers it did not
    order; the index version searched."""
    pairs, unreranked, version = [], 0, ""
    for q in queries:
        acl = AclFilter(tenant_id=tenant, readers=q.readers)
        request = RetrieveRequest(
            query=q.text, top_k=top_k, mode="hybrid", rerank=False, max_context_tokens=0
        )
        without = service.retrieve(request, acl)
        with_ = service.retrieve(replace(request, rerank=True), acl, rerank_with=choice)
        unreranked += with_.reranker is None
        version = with_.index_version
        pairs.append((_ndcg10(without, q.qrels), _ndcg10(with_, q.qrels)))
    return pairs, unreranked, version


def gate(
    settings: Settings,
    tenant: str,
    caller: Caller,
    *,
    model: Path,
    dataset: Path | None = None,
    from_feedback: bool = False,
    top_k: int = 10,
    seed: int = 0,
    split: str = "test",
    force_off: bool = False,
    embedder: Embedder | None = None,
    use_ray: bool = True,
) -> GateReport:
    """Measure ``model`` on the tenant's judged queries and store the decision: the tenant's
    reranker row on when :func:`passes` (and not ``force_off``), else off with the report
    (it stays off); audited either way (``reranker.gate``).

    Raises:
        InvalidInputError: no source named, no model folder, fewer than ``MIN_QUERIES``
            judged queries, or no index version behind the alias searched.
    """
    if not model.is_dir():
        raise InvalidInputError(f"no reranker model folder at {model}")
    path = str(model.resolve())
    started = time.monotonic()
    judged = judged_set(
        settings, tenant, command="gate", dataset=dataset, from_feedback=from_feedback, split=split,
        use_ray=use_ray, embedder=embedder, minimum=MIN_QUERIES, fewer=str(MIN_QUERIES),
    )  # fmt: skip
    url, queries, sources = judged.url, judged.queries, judged.sources
    prepared = time.monotonic()
    pool = ConnectionPool(url, min_size=1, max_size=4, open=True)
    service, close = build_search_service(settings, pool, judged.embedder, alias=judged.alias, watch=False)
    scorer = load_batching_reranker(settings, path)
    try:
        choice = RerankChoice(scorer, model.name)
        pairs, unreranked, version = _paired(service, queries, choice, tenant=tenant, top_k=top_k)
    finally:
        scorer.close()
        close()
        pool.close()
    searched = time.monotonic()
    differences = [w - wo for wo, w in pairs]
    interval = cv.bootstrap_interval(differences, seed=seed)
    difference = cv.mean(differences)
    passed = passes(difference, interval)
    outcome = GateOutcome(
        model=path,
        passed=passed,
        forced_off=force_off,
        ndcg_without=round(cv.mean([wo for wo, _ in pairs]), 4),
        ndcg_with=round(cv.mean([w for _, w in pairs]), 4),
        ndcg_difference=round(difference, 4),
        interval=(round(interval[0], 4), round(interval[1], 4)),
        queries=len(pairs),
        sources=sources,
        rule=RULE,
    )
    with psycopg.connect(url) as conn:
        record_gate(conn, caller, tenant_id=tenant, outcome=outcome)
    rc = service.rerank_config
    return GateReport(
        tenant=tenant, model=path, sources=sources, queries=len(pairs), top_k=top_k,
        candidates=rc.candidates, blend=rc.blend, ndcg_without=outcome.ndcg_without,
        ndcg_with=outcome.ndcg_with, ndcg_difference=outcome.ndcg_difference, interval=outcome.interval,
        passed=passed, enabled=outcome.enabled, forced_off=force_off, unreranked_queries=unreranked,
        per_query=[
            {"query_id": q.query_id, "without": round(wo, 4), "with": round(w, 4)}
            for q, (wo, w) in zip(queries, pairs, strict=True)
        ],
        index_version=version,
        seconds={"prepare": round(prepared - started, 1), "search": round(searched - prepared, 1)},
    )  # fmt: skip
