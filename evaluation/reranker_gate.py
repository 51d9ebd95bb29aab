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

A model must also rerank within the serving budget (:func:`refusals`, issue 44): an answer the
reranker did not order within ``[rerank] budget_ms`` is the fused order, so a model too slow
for this machine scores "no worse" on nDCG while every served answer would wait out the budget
and come back unreranked. The gate refuses it when fewer than ``MIN_RERANKED_SHARE`` of the
judged queries were reranked, or when the rerank stage's 95th percentile is over the budget;
the report carries the rerank latency it measured (p50, p95, per query) beside the budget.
"""

from __future__ import annotations

import math
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
# The judged queries that must come back reranked within the budget: a model that leaves more
# than one in twenty in the fused order would leave as many served answers waiting out the budget.
MIN_RERANKED_SHARE = 0.95
RULE = (
    f"mean nDCG@10 difference >= 0 and its 95% interval's lower bound >= -{TOLERANCE};"
    f" >= {MIN_RERANKED_SHARE:.0%} of the queries reranked and the rerank p95 within the budget"
)


def passes(mean_difference: float, interval: tuple[float, float]) -> bool:
    """The gate's quality rule: no worse on average, and no plausible loss beyond ``TOLERANCE``."""
    return mean_difference >= 0 and interval[0] >= -TOLERANCE


@dataclass(frozen=True, slots=True)
class GateLatency:
    """What the rerank stage cost per judged query, as served (``timings_ms["rerank"]``)."""

    budget_ms: int  # [rerank] budget_ms: a rerank past it is abandoned, the answer unreranked
    p50_ms: float
    p95_ms: float
    queries: int
    reranked: int  # queries whose answer the model ordered within the budget
    reranked_share: float

    @classmethod
    def of(cls, rerank_ms: list[float], reranked: int, budget_ms: int) -> GateLatency:
        n = len(rerank_ms)
        return cls(
            budget_ms, round(_percentile(rerank_ms, 50), 1), round(_percentile(rerank_ms, 95), 1), n,
            reranked, round(reranked / n, 4) if n else 0.0,
        )  # fmt: skip


def _percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (0 for no values): a p95 of 16 queries is their slowest but
    none, not an interpolation below a query that did run over."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def refusals(latency: GateLatency) -> list[str]:
    """Why the gate refuses a model whatever its nDCG (empty: none): answers it did not rerank,
    or a rerank slower than the serving budget."""
    out = []
    if latency.reranked_share < MIN_RERANKED_SHARE:
        out.append(
            f"only {latency.reranked} of {latency.queries} judged queries were reranked within the"
            f" {latency.budget_ms} ms budget (at least {MIN_RERANKED_SHARE:.0%} must be)"
        )
    if latency.p95_ms > latency.budget_ms:
        out.append(f"rerank p95 {latency.p95_ms:.0f} ms is over the {latency.budget_ms} ms budget")
    return out


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
    latency: GateLatency | None = None  # the rerank stage per query against the budget
    refused: list[str] = field(default_factory=list)  # :func:`refusals`: failed whatever the nDCG
    per_query: list[dict[str, Any]] = field(default_factory=list)  # id, without, with, rerank_ms
    index_version: str = ""
    seconds: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _ndcg10(result: RetrieveResult, qrels: dict[str, int]) -> float:
    docs = doc_scores_from_chunks([(r.detail.external_id, r.score) for r in result.results])
    return ndcg_at_k(docs, qrels, 10)


@dataclass(frozen=True, slots=True)
class _Paired:
    pairs: list[tuple[float, float]]  # each query's nDCG@10 without and with the reranker
    rerank_ms: list[float]  # each "with" answer's rerank stage (the budget when it ran over)
    unreranked: int  # "with" answers the reranker did not order
    version: str  # the index version searched


def _paired(
    service: SearchService, queries: list[JudgedQuery], choice: RerankChoice, *, tenant: str, top_k: int
) -> _Paired:
    """Each query searched without and with the reranker, as served."""
    pairs, rerank_ms, unreranked, version = [], [], 0, ""
    for q in queries:
        acl = AclFilter(tenant_id=tenant, readers=q.readers)
        request = RetrieveRequest(
            query=q.text, top_k=top_k, mode="hybrid", rerank=False, max_context_tokens=0
        )
        without = service.retrieve(request, acl)
        with_ = service.retrieve(replace(request, rerank=True), acl, rerank_with=choice)
        unreranked += with_.reranker is None
        rerank_ms.append(with_.timings_ms.get("rerank", 0.0))
        version = with_.index_version
        pairs.append((_ndcg10(without, q.qrels), _ndcg10(with_, q.qrels)))
    return _Paired(pairs, rerank_ms, unreranked, version)


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
    reranker row on when :func:`passes` and nothing :func:`refusals` it (and not
    ``force_off``), else off with the report (it stays off); audited either way
    (``reranker.gate``).

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
        measured = _paired(service, queries, choice, tenant=tenant, top_k=top_k)
    finally:
        scorer.close()
        close()
        pool.close()
    searched = time.monotonic()
    pairs, rc = measured.pairs, service.rerank_config
    differences = [w - wo for wo, w in pairs]
    interval = cv.bootstrap_interval(differences, seed=seed)
    difference = cv.mean(differences)
    latency = GateLatency.of(measured.rerank_ms, len(pairs) - measured.unreranked, rc.budget_ms)
    refused = refusals(latency)
    passed = passes(difference, interval) and not refused
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
        latency=asdict(latency),
        refused=refused,
    )
    with psycopg.connect(url) as conn:
        record_gate(conn, caller, tenant_id=tenant, outcome=outcome)
    return GateReport(
        tenant=tenant, model=path, sources=sources, queries=len(pairs), top_k=top_k,
        candidates=rc.candidates, blend=rc.blend, ndcg_without=outcome.ndcg_without,
        ndcg_with=outcome.ndcg_with, ndcg_difference=outcome.ndcg_difference, interval=outcome.interval,
        passed=passed, enabled=outcome.enabled, forced_off=force_off,
        unreranked_queries=measured.unreranked, latency=latency, refused=refused,
        per_query=[
            {"query_id": q.query_id, "without": round(wo, 4), "with": round(w, 4), "rerank_ms": ms}
            for q, (wo, w), ms in zip(queries, pairs, measured.rerank_ms, strict=True)
        ],
        index_version=measured.version,
        seconds={"prepare": round(prepared - started, 1), "search": round(searched - prepared, 1)},
    )  # fmt: skip
