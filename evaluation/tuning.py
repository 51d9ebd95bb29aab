"""``ragline tune``: search a tenant's fusion settings against its judged queries, cross-validated.

Judged queries come from a BEIR collection ingested into the tenant (``ragline eval``'s own
ingestion, :mod:`evaluation.harness`) and/or the tenant's relevance feedback. Each query's
two candidate lists are fetched once, at the deepest depth any setting needs, through the
real ``SearchService`` as the principal the query belongs to (ACL masks built as for any
request); every setting is then scored offline by re-fusing those lists with
:func:`retrieve.service.fuse_lists`, the fusion step ``/v1/retrieve`` itself runs, so a
setting scores the ranking a request with it gets (``tests/integration/evaluation/
test_tune.py`` checks it order for order). The statistics are :mod:`evaluation.cv`.

BM25 ``k1``/``b`` are not searched: bm25s precomputes every (term, chunk) score with them
when a version is built (``index/bm25_shards.py``), so a new pair needs a rebuild, and
requests carry no per-query ``k1``/``b``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from catalog import feedback as feedback_repo
from catalog import indexes
from catalog.connect import migrated_url
from catalog.fusion import FusionOverride
from catalog.principals import groups_of
from catalog.serving import chunk_details
from core.beir import load_beir
from core.errors import InvalidInputError
from core.ir_metrics import doc_scores_from_chunks, ndcg_at_k, recall_at_k
from core.settings import Settings
from evaluation import cv
from evaluation.harness import EVAL_ALIAS, EVAL_READER, index_eval_version, ingest_collection
from index.embedder import Embedder
from retrieve.fusion import FusedHit
from retrieve.service import CandidateLegs, FusionConfig, RetrieveRequest, SearchService, fuse_lists
from services.caller import Caller
from services.tuning import TuningOutcome, record_tuning
from wiring import build_search_service, make_runner


@dataclass(frozen=True, slots=True)
class JudgedQuery:
    """A query with graded judgements (external id -> grade, > 0 relevant), searched as
    ``readers`` (the evaluating principal's ACL entries)."""

    query_id: str
    text: str
    qrels: dict[str, int]
    readers: frozenset[str]


@dataclass(frozen=True, slots=True)
class QueryCandidates:
    query: JudgedQuery
    legs: CandidateLegs
    external: dict[int, str]  # candidate row -> its document's external id (readable ones only)


def dataset_queries(dataset: Path, split: str) -> list[JudgedQuery]:
    """The collection's judged queries (those with a document graded > 0), as ``ragline eval``
    searches them (every eval document is public)."""
    collection = load_beir(dataset, split=split)
    return [
        JudgedQuery(qid, text, dict(collection.qrels[qid]), frozenset({EVAL_READER}))
        for qid, text in collection.queries.items()
        if any(g > 0 for g in collection.qrels.get(qid, {}).values())
    ]


def feedback_queries(conn: psycopg.Connection, *, tenant_id: str) -> list[JudgedQuery]:
    """The tenant's feedback as judged queries: one per (principal, query text), searched as
    that principal (itself and its groups now), so no judgement reaches a document it cannot
    read. Grades as stored: ``relevant`` 1, ``not_relevant`` 0, graded 0-3 as given (nDCG
    gains; recall counts grade > 0); a later judgement of a document replaces an earlier one.
    Only feedback recorded while query text was stored has a query to replay."""
    grouped: dict[tuple[str, str], dict[str, int]] = {}
    for principal, query, external_id, grade in feedback_repo.judgements(conn, tenant_id=tenant_id):
        grouped.setdefault((principal, query), {})[external_id] = grade
    out = []
    for (principal, query), qrels in sorted(grouped.items()):
        if not any(g > 0 for g in qrels.values()):
            continue  # nothing relevant: every ranking scores 0, it cannot tell settings apart
        digest = hashlib.sha256(f"{principal}\n{query}".encode()).hexdigest()[:12]
        readers = frozenset((principal, *groups_of(conn, tenant_id=tenant_id, principal_id=principal)))
        out.append(JudgedQuery(f"feedback:{digest}", query, qrels, readers))
    return out


def gather(
    service: SearchService, queries: Sequence[JudgedQuery], *, tenant: str, top_k: int, depth: int
) -> list[QueryCandidates]:
    """Each query's two candidate lists, ``depth`` deep, and their documents' external ids
    (re-checked in SQL as every answer's details are)."""
    out = []
    deep = FusionOverride(dense_candidates=depth, lexical_candidates=depth)
    for q in queries:
        acl = AclFilter(tenant_id=tenant, readers=q.readers)
        request = RetrieveRequest(
            query=q.text, top_k=top_k, mode="hybrid", rerank=False, max_context_tokens=0, fusion=deep
        )
        legs = service.candidate_legs(request, acl)
        rows = sorted({h.chunk_id for h in (*legs.dense, *legs.lexical)})
        with service.read_pool.connection() as conn:
            details = chunk_details(conn, rows=rows, tenant_id=tenant, readers=sorted(q.readers))
        out.append(QueryCandidates(q, legs, {row: d.external_id for row, d in details.items()}))
    return out


def ranking(candidates: QueryCandidates, config: FusionConfig, top_k: int) -> list[FusedHit]:
    """The ``top_k`` hits a hybrid request with ``config`` gets from these candidates: each leg
    cut to its depth, fused as ``/v1/retrieve`` fuses, unreadable rows dropped."""
    legs = candidates.legs
    lists = [legs.dense[: config.depth("dense", top_k)], legs.lexical[: config.depth("lexical", top_k)]]
    fused = fuse_lists(lists, [config.dense_weight, config.lexical_weight], config)
    return [f for f in fused if f.chunk_id in candidates.external][:top_k]


def score(candidates: QueryCandidates, config: FusionConfig, top_k: int) -> tuple[float, float]:
    """nDCG@10 and recall@100 of the setting on this query, documents by their best chunk."""
    hits = ranking(candidates, config, top_k)
    docs = doc_scores_from_chunks([(candidates.external[f.chunk_id], f.score) for f in hits])
    qrels = candidates.query.qrels
    return ndcg_at_k(docs, qrels, 10), recall_at_k(docs, qrels, 100)


def _effective(config: FusionConfig, top_k: int) -> tuple[object, ...]:
    """What decides a ranking: two configs with equal keys rank every query alike."""
    depths = (config.depth("dense", top_k), config.depth("lexical", top_k))
    k = config.rrf_k if config.method == "rrf" else None
    return (config.method, k, config.dense_weight, config.lexical_weight, depths)


@dataclass(frozen=True, slots=True)
class FoldReport:
    fold: int
    queries: int
    chosen: dict[str, Any]  # the setting chosen on the other folds
    ndcg: float  # held out: chosen, then current
    current_ndcg: float
    recall: float
    current_recall: float


@dataclass(slots=True)
class TuneReport:
    tenant: str
    sources: list[str]
    queries: int
    settings_tried: int
    top_k: int
    folds: list[FoldReport]
    current: dict[str, Any]
    winner: dict[str, Any]
    winner_override: dict[str, Any]  # what is stored for the tenant when applied
    winner_fold_wins: int  # folds whose training chose the same ranking as the winner
    ndcg_mean: float  # held out over all queries: tuned, current, difference
    current_ndcg_mean: float
    ndcg_difference: float
    ndcg_interval: tuple[float, float]
    recall_mean: float
    current_recall_mean: float
    recall_difference: float
    recall_interval: tuple[float, float]
    applied: bool = False
    forced: bool = False
    reason: str = ""
    index_version: str = ""
    degraded_queries: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def judged_queries(
    settings: Settings,
    url: str,
    tenant: str,
    *,
    dataset: Path | None,
    from_feedback: bool,
    split: str,
    use_ray: bool,
    embedder: Embedder | None,
) -> tuple[list[JudgedQuery], list[str], str, Embedder | None]:
    """The judged queries, their sources, the alias to search and the model loaded on the way.

    A dataset is ingested into ``tenant`` by ``ragline eval``'s own code (unchanged documents
    skipped by content hash) and searched on the eval alias, rebuilt when the catalog moved;
    feedback alone is searched on ``live``, what the tenant's users see.
    """
    queries: list[JudgedQuery] = []
    sources: list[str] = []
    alias = "live"
    if dataset is not None:
        runner = make_runner(settings, url, use_ray=use_ray, embedder=embedder)
        ingest_collection(load_beir(dataset, split=split), tenant=tenant, url=url, runner=runner)
        index_eval_version(settings, url, tenant=tenant)
        embedder = embedder or getattr(runner, "_embedder", None)
        queries += dataset_queries(dataset, split)
        sources.append(str(dataset))
        alias = EVAL_ALIAS
    if from_feedback:
        with psycopg.connect(url) as conn:
            queries += feedback_queries(conn, tenant_id=tenant)
        sources.append("feedback")
    return queries, sources, alias, embedder


@dataclass(frozen=True, slots=True)
class JudgedSet:
    """What a command measures on: the catalog, the judged queries, their sources, the alias
    to search and the embedding model loaded on the way (None: not loaded yet)."""

    url: str
    queries: list[JudgedQuery]
    sources: list[str]
    alias: str
    embedder: Embedder | None


def judged_set(
    settings: Settings,
    tenant: str,
    *,
    command: str,
    dataset: Path | None,
    from_feedback: bool,
    split: str,
    use_ray: bool,
    embedder: Embedder | None,
    minimum: int,
    fewer: str,
) -> JudgedSet:
    """:func:`judged_queries` for ``ragline tune`` and ``ragline reranker gate``, refused
    where nothing can be measured.

    Raises:
        InvalidInputError: no source named, fewer than ``minimum`` judged queries (the message
            says "fewer than ``fewer``"), or no index version behind the alias searched.
    """
    if dataset is None and not from_feedback:
        raise InvalidInputError(f"{command} needs judged queries: --dataset DIR and/or --from-feedback")
    url = migrated_url(settings)
    queries, sources, alias, embedder = judged_queries(
        settings, url, tenant, dataset=dataset, from_feedback=from_feedback, split=split,
        use_ray=use_ray, embedder=embedder,
    )  # fmt: skip
    if len(queries) < minimum:
        raise InvalidInputError(f"tenant {tenant}: {len(queries)} judged queries, fewer than {fewer}")
    with psycopg.connect(url) as conn:
        if indexes.resolve_alias(conn, alias=alias) is None:
            raise InvalidInputError(f"no index version behind alias {alias!r} to {command} on")
    return JudgedSet(url, queries, sources, alias, embedder)


def _cross_validate(
    gathered: list[QueryCandidates],
    configs: list[FusionConfig],
    *,
    top_k: int,
    folds: int,
    seed: int,
) -> cv.CrossValidation:
    ndcg: list[list[float]] = []
    recall: list[list[float]] = []
    for config in configs:
        scored = [score(c, config, top_k) for c in gathered]
        ndcg.append([n for n, _ in scored])
        recall.append([r for _, r in scored])
    ids = [c.query.query_id for c in gathered]
    return cv.cross_validate(ndcg, recall, 0, ids, k=folds, seed=seed)


def tune(
    settings: Settings,
    tenant: str,
    caller: Caller,
    *,
    dataset: Path | None = None,
    from_feedback: bool = False,
    folds: int = 5,
    seed: int = 0,
    top_k: int = 100,
    force: bool = False,
    split: str = "test",
    embedder: Embedder | None = None,
    use_ray: bool = True,
) -> TuneReport:
    """Cross-validate the fusion grid against the tenant's current fusion on its judged
    queries; apply the setting chosen on all of them when the 95% interval of the held-out
    nDCG@10 difference lies above 0 (or ``force``); audited either way (``fusion.tune``).

    The current setting is row 0, so a tie keeps it: tuning changes nothing it cannot measure.

    Raises:
        InvalidInputError: no source named, fewer judged queries than folds, or no index
            version behind the alias searched.
    """
    started = time.monotonic()
    judged = judged_set(
        settings, tenant, command="tune", dataset=dataset, from_feedback=from_feedback, split=split,
        use_ray=use_ray, embedder=embedder, minimum=max(folds, 2), fewer=f"{folds} folds",
    )  # fmt: skip
    url, queries, sources = judged.url, judged.queries, judged.sources
    prepared = time.monotonic()
    pool = ConnectionPool(url, min_size=1, max_size=4, open=True)
    service, close = build_search_service(settings, pool, judged.embedder, alias=judged.alias, watch=False)
    try:
        base = service.fusion  # the server's settings: what a stored override falls back to
        current = service.fusion_for(tenant)
        space = cv.grid(top_k)
        configs = [current, *(base.merged(o) for o in space)]
        depth = max(c.depth(leg, top_k) for c in configs for leg in ("dense", "lexical"))
        gathered = gather(service, queries, tenant=tenant, top_k=top_k, depth=depth)
    finally:
        close()
        pool.close()
    searched = time.monotonic()
    result = _cross_validate(gathered, configs, top_k=top_k, folds=folds, seed=seed)
    report = _report(tenant, sources, gathered, configs, space, result, top_k=top_k)
    report.degraded_queries = sum(bool(c.legs.degraded) for c in gathered)
    report.index_version = gathered[0].legs.index_version if gathered else ""
    _decide(report, result, configs, force=force, top_k=top_k)
    override = FusionOverride(**report.winner_override) if report.applied else None
    with psycopg.connect(url) as conn:
        record_tuning(conn, caller, tenant_id=tenant, override=override, base=base, outcome=_outcome(report))
    report.seconds = {
        "prepare": round(prepared - started, 1),
        "candidates": round(searched - prepared, 1),
        "cross_validation": round(time.monotonic() - searched, 1),
    }
    return report


def _report(
    tenant: str,
    sources: list[str],
    gathered: list[QueryCandidates],
    configs: list[FusionConfig],
    space: list[FusionOverride],
    result: cv.CrossValidation,
    *,
    top_k: int,
) -> TuneReport:
    folds = [
        FoldReport(f.fold, f.queries, configs[f.chosen].describe(), round(f.ndcg, 4),
                   round(f.current_ndcg, 4), round(f.recall, 4), round(f.current_recall, 4))
        for f in result.folds
    ]  # fmt: skip
    winner = configs[result.final]
    # Row 0 is the current setting (not in the grid): applying it changes nothing.
    override = space[result.final - 1].given() if result.final > 0 else {}
    same = sum(_effective(configs[f.chosen], top_k) == _effective(winner, top_k) for f in result.folds)
    n = len(gathered)
    held_n = sum(f.ndcg * f.queries for f in result.folds) / n
    held_r = sum(f.recall * f.queries for f in result.folds) / n
    cur_n = sum(f.current_ndcg * f.queries for f in result.folds) / n
    cur_r = sum(f.current_recall * f.queries for f in result.folds) / n
    return TuneReport(
        tenant=tenant,
        sources=sources,
        queries=n,
        settings_tried=len(configs),
        top_k=top_k,
        folds=folds,
        current=configs[0].describe(),
        winner=winner.describe(),
        winner_override=override,
        winner_fold_wins=same,
        ndcg_mean=round(held_n, 4),
        current_ndcg_mean=round(cur_n, 4),
        ndcg_difference=round(cv.mean(result.ndcg_differences), 4),
        ndcg_interval=(round(result.interval[0], 4), round(result.interval[1], 4)),
        recall_mean=round(held_r, 4),
        current_recall_mean=round(cur_r, 4),
        recall_difference=round(cv.mean(result.recall_differences), 4),
        recall_interval=(round(result.recall_interval[0], 4), round(result.recall_interval[1], 4)),
    )


def _decide(
    report: TuneReport, result: cv.CrossValidation, configs: list[FusionConfig], *, force: bool, top_k: int
) -> None:
    """Apply only what held-out folds show better (or what the operator forces), and say why."""
    low, high = result.interval
    unchanged = _effective(configs[result.final], top_k) == _effective(configs[0], top_k)
    if unchanged:
        report.reason = "the best setting on all judged queries ranks as the current one: nothing to apply"
    elif low > 0:
        report.applied = True
        report.reason = f"held-out nDCG@10 difference {low:+.4f}..{high:+.4f} (95%) lies above 0"
    elif force:
        report.applied = report.forced = True
        report.reason = f"forced (--apply): held-out nDCG@10 difference {low:+.4f}..{high:+.4f} (95%)"
    else:
        report.reason = (
            f"not applied: the 95% interval of the held-out nDCG@10 difference, {low:+.4f}..{high:+.4f},"
            " does not lie above 0 (--apply forces it)"
        )


def _outcome(report: TuneReport) -> TuningOutcome:
    return TuningOutcome(
        applied=report.applied,
        forced=report.forced,
        queries=report.queries,
        folds=len(report.folds),
        current=report.current,
        winner=report.winner,
        ndcg_difference=report.ndcg_difference,
        interval=report.ndcg_interval,
        sources=report.sources,
    )
