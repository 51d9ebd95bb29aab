"""IR evaluation metrics (nDCG, recall, MRR); the BEIR loader lives in ``core.beir``.

Pure functions over document ids, in ``core`` beside the BEIR loader so that every layer
scores alike: ``ragline eval`` (``evaluation``), the migration gate (``jobs.reembed_gate``)
and the benchmarks (``bench``).

Definitions follow trec_eval so numbers compare with published ones: nDCG uses linear
gain (the grade) and a ``log2(rank + 1)`` discount, the ideal ranking is built from every
judged document with a grade above 0, and a document counts as relevant when its grade is
above 0. Duplicate document ids in a ranking count once, at their first position.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from core.beir import BeirCollection, BeirDocument, Qrels, load_beir

__all__ = [
    "BeirCollection",
    "BeirDocument",
    "EvalResult",
    "QueryMetrics",
    "Qrels",
    "doc_scores_from_chunks",
    "evaluate_run",
    "load_beir",
    "mrr_at_k",
    "ndcg_at_k",
    "recall_at_k",
]


def _unique(ranked_doc_ids: Iterable[str], k: int) -> list[str]:
    """The first ``k`` distinct ids, in order."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return list(dict.fromkeys(ranked_doc_ids))[:k]


def ndcg_at_k(ranked_doc_ids: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Normalised discounted cumulative gain at ``k``, as trec_eval's ``ndcg_cut.k``.

    Args:
        ranked_doc_ids: Document ids, best first.
        qrels: Graded judgements of this query (grade <= 0 means not relevant).
        k: Cut-off, >= 1.

    Returns:
        nDCG@k in [0, 1]; 0.0 when no judged document has a grade above 0.
    """
    top = _unique(ranked_doc_ids, k)
    dcg = math.fsum(max(qrels.get(doc_id, 0), 0) / math.log2(rank + 1) for rank, doc_id in enumerate(top, 1))
    ideal_gains = sorted((grade for grade in qrels.values() if grade > 0), reverse=True)[:k]
    idcg = math.fsum(grade / math.log2(rank + 1) for rank, grade in enumerate(ideal_gains, 1))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked_doc_ids: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Fraction of the relevant (grade > 0) documents found in the top ``k``.

    Returns:
        Recall@k in [0, 1]; 0.0 when the query has no relevant document.
    """
    relevant = {doc_id for doc_id, grade in qrels.items() if grade > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(_unique(ranked_doc_ids, k))) / len(relevant)


def mrr_at_k(ranked_doc_ids: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant (grade > 0) document in the top ``k``, else 0."""
    for rank, doc_id in enumerate(_unique(ranked_doc_ids, k), 1):
        if qrels.get(doc_id, 0) > 0:
            return 1.0 / rank
    return 0.0


@dataclass(frozen=True, slots=True)
class QueryMetrics:
    """The metrics of one query (or their means) at one cut-off."""

    ndcg: float
    recall: float
    mrr: float


@dataclass(frozen=True, slots=True)
class EvalResult:
    """Per-query and mean metrics of a run.

    ``per_query[query_id][k]`` and ``mean[k]`` hold the metrics at cut-off ``k``. Means are
    over the evaluated queries: those with at least one judged document of grade above 0.
    The others are listed in ``skipped_query_ids`` and excluded from the means.
    """

    ks: tuple[int, ...]
    per_query: Mapping[str, Mapping[int, QueryMetrics]]
    mean: Mapping[int, QueryMetrics]
    skipped_query_ids: tuple[str, ...] = ()

    @property
    def num_evaluated(self) -> int:
        return len(self.per_query)

    @property
    def num_skipped(self) -> int:
        return len(self.skipped_query_ids)

    def table(self) -> dict[str, float]:
        """Means flattened for reports, e.g. ``{"ndcg@10": 0.38, "recall@10": ..., "mrr@10": ...}``."""
        rows: dict[str, float] = {}
        for k in self.ks:
            metrics = self.mean[k]
            rows.update({f"ndcg@{k}": metrics.ndcg, f"recall@{k}": metrics.recall, f"mrr@{k}": metrics.mrr})
        return rows


def _mean(values: Iterable[QueryMetrics]) -> QueryMetrics:
    items = list(values)
    count = len(items)
    return QueryMetrics(
        ndcg=math.fsum(m.ndcg for m in items) / count,
        recall=math.fsum(m.recall for m in items) / count,
        mrr=math.fsum(m.mrr for m in items) / count,
    )


def evaluate_run(run: Mapping[str, Sequence[str]], qrels: Qrels, ks: Iterable[int]) -> EvalResult:
    """Evaluate a run (ranked document ids per query) against graded judgements.

    Every query in ``qrels`` or ``run`` is considered. One without a document of grade
    above 0 cannot be scored and is skipped (and counted); a judged query missing from
    ``run`` is scored as an empty ranking, i.e. 0.

    Args:
        run: Query id to document ids, best first.
        qrels: Query id to document id to grade.
        ks: Cut-offs, each >= 1.

    Returns:
        Per-query metrics, their means and the skipped query ids.

    Raises:
        ValueError: If ``ks`` is empty or holds a value below 1, or no query can be evaluated.
    """
    cutoffs = tuple(sorted(set(ks)))
    if not cutoffs or cutoffs[0] < 1:
        raise ValueError(f"ks must be non-empty and >= 1, got {cutoffs}")
    per_query: dict[str, Mapping[int, QueryMetrics]] = {}
    skipped: list[str] = []
    for query_id in sorted(set(qrels) | set(run)):
        judged = qrels.get(query_id, {})
        if not any(grade > 0 for grade in judged.values()):
            skipped.append(query_id)
            continue
        ranking = run.get(query_id, ())
        per_query[query_id] = MappingProxyType(
            {
                k: QueryMetrics(
                    ndcg_at_k(ranking, judged, k),
                    recall_at_k(ranking, judged, k),
                    mrr_at_k(ranking, judged, k),
                )
                for k in cutoffs
            }
        )
    if not per_query:
        raise ValueError("no query has a judged document with grade > 0")
    mean = {k: _mean(metrics[k] for metrics in per_query.values()) for k in cutoffs}
    return EvalResult(cutoffs, MappingProxyType(per_query), MappingProxyType(mean), tuple(skipped))


def doc_scores_from_chunks(
    chunk_hits: Sequence[tuple[str, float]], agg: Literal["max", "sum"] = "max"
) -> list[str]:
    """Rank documents from scored chunk hits (chunk retrieval evaluated at document level).

    A document scores the best (``max``) or the total (``sum``) of its chunks' scores.
    Ties keep the order in which the documents first appear among the hits.

    Args:
        chunk_hits: ``(document id, chunk score)`` pairs, usually best first.
        agg: ``"max"`` or ``"sum"``.

    Returns:
        Document ids, best first.

    Raises:
        ValueError: On an unknown ``agg``.
    """
    if agg not in ("max", "sum"):
        raise ValueError(f"agg must be 'max' or 'sum', got {agg!r}")
    per_doc: dict[str, list[float]] = {}
    for doc_id, score in chunk_hits:
        per_doc.setdefault(doc_id, []).append(score)
    combine = max if agg == "max" else math.fsum
    scored = [
        (combine(scores), position, doc_id) for position, (doc_id, scores) in enumerate(per_doc.items())
    ]
    scored.sort(key=lambda row: (-row[0], row[1]))
    return [doc_id for _, _, doc_id in scored]
