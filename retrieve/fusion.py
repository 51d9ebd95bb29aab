"""Rank fusion: combine the ranked lists of several retrievers into one ranking.

Pure functions over lists of :class:`core.records.Hit`; every retrieval mode (hybrid,
dense-only, lexical-only) returns ``list[FusedHit]`` so callers handle one type.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from core.records import Hit

DEFAULT_RRF_K = 60


@dataclass(frozen=True, slots=True)
class FusedHit:
    """One chunk of a fused ranking.

    ``stage_scores`` and ``stage_ranks`` hold, per contributing list (keyed by ``Hit.source``),
    the chunk's original score and its 1-based rank in that list.
    """

    chunk_id: int
    score: float
    stage_scores: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    stage_ranks: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def best_rank(self) -> int:
        """The best (smallest) rank the chunk had in any contributing list."""
        return min(self.stage_ranks.values(), default=0)


@dataclass(slots=True)
class _Accumulator:
    contributions: list[float] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)


def _dedupe(hits: Sequence[Hit]) -> list[Hit]:
    """Keep each chunk's first (best-ranked) occurrence; later copies do not take a rank."""
    seen: set[int] = set()
    unique: list[Hit] = []
    for hit in hits:
        if hit.chunk_id not in seen:
            seen.add(hit.chunk_id)
            unique.append(hit)
    return unique


def _list_source(hits: Sequence[Hit], position: int) -> str | None:
    sources = {hit.source for hit in hits}
    if len(sources) > 1:
        raise ValueError(f"ranked list {position} mixes sources {sorted(sources)}; fuse one source per list")
    return next(iter(sources), None)


def _check_arguments(
    ranked_lists: Sequence[Sequence[Hit]], k: int, weights: Sequence[float] | None, limit: int | None
) -> list[float]:
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    if weights is None:
        return [1.0] * len(ranked_lists)
    if len(weights) != len(ranked_lists):
        raise ValueError(f"got {len(weights)} weights for {len(ranked_lists)} ranked lists")
    for weight in weights:
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"weights must be finite and >= 0, got {weight}")
    return [float(weight) for weight in weights]


def _sort_and_limit(fused: list[FusedHit], limit: int | None) -> list[FusedHit]:
    # Ties are common (a chunk at rank r in list A and another at rank r in list B score the
    # same), so the order must not depend on dict or input order.
    fused.sort(key=lambda hit: (-hit.score, hit.best_rank, hit.chunk_id))
    return fused if limit is None else fused[:limit]


def _fuse(
    ranked_lists: Sequence[Sequence[Hit]],
    weights: Sequence[float],
    limit: int | None,
    contribution: Callable[[float, int, float], float],
    *,
    normalise: Callable[[Sequence[Hit]], list[float]] | None = None,
) -> list[FusedHit]:
    """Sum ``contribution(weight, rank, normalised score)`` over the lists each chunk is in
    (ranks from 1 after dropping repeats; ``normalise`` scales one list's scores, else 0)."""
    accumulators: dict[int, _Accumulator] = {}
    seen_sources: set[str] = set()
    for position, (hits, weight) in enumerate(zip(ranked_lists, weights, strict=True)):
        source = _list_source(hits, position)
        if source is None:
            continue
        if source in seen_sources:
            raise ValueError(f"two ranked lists share source {source!r}; stage keys would collide")
        seen_sources.add(source)
        if weight == 0.0:
            continue
        unique = _dedupe(hits)
        norms = normalise(unique) if normalise is not None else [0.0] * len(unique)
        for rank, (hit, norm) in enumerate(zip(unique, norms, strict=True), start=1):
            acc = accumulators.setdefault(hit.chunk_id, _Accumulator())
            acc.contributions.append(contribution(weight, rank, norm))
            acc.scores[source] = hit.score
            acc.ranks[source] = rank
    fused = [
        FusedHit(
            chunk_id=chunk_id,
            score=math.fsum(acc.contributions),
            stage_scores=MappingProxyType(acc.scores),
            stage_ranks=MappingProxyType(acc.ranks),
        )
        for chunk_id, acc in accumulators.items()
    ]
    return _sort_and_limit(fused, limit)


def rrf(
    ranked_lists: Sequence[Sequence[Hit]],
    *,
    k: int = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> list[FusedHit]:
    """Fuse ranked lists with (weighted) reciprocal rank fusion.

    Cormack, Clarke & Buettcher, "Reciprocal Rank Fusion outperforms Condorcet and
    individual Rank Learning Methods", SIGIR 2009:
    ``score(d) = sum_i w_i / (k + rank_i(d))`` with 1-based ranks, summed over the lists
    that contain ``d``. Only ranks matter, so scores on different scales (cosine, BM25)
    fuse without normalisation.

    Each list must hold hits of one ``Hit.source``, distinct across lists; ``stage_scores``
    and ``stage_ranks`` are keyed by it. Within a list a repeated chunk keeps its first
    (best) position and later copies are dropped before ranking. A list with weight 0 is
    ignored entirely (it adds neither score, ranks nor candidates), so the result equals
    fusing without it. Ties are broken by best single rank, then by ``chunk_id``; scores are
    summed with ``math.fsum`` so the result does not depend on the order of the lists.

    Args:
        ranked_lists: One best-first list of hits per retriever.
        k: Smoothing constant; 60 is the paper's value.
        weights: One non-negative weight per list; ``None`` means all 1.
        limit: Keep at most this many fused hits; ``None`` keeps all.

    Returns:
        Fused hits, best first.

    Raises:
        ValueError: On negative ``k`` or ``limit``, a weight count mismatch, negative or
            non-finite weights, a list mixing sources or two lists sharing a source.
    """
    resolved_weights = _check_arguments(ranked_lists, k, weights, limit)
    return _fuse(ranked_lists, resolved_weights, limit, lambda weight, rank, _: weight / (k + rank))


def _min_max(hits: Sequence[Hit]) -> list[float]:
    """Scores scaled to [0, 1] by the list's own minimum and maximum; a list whose scores are
    all equal (one hit included) scales every hit to 1."""
    scores = [hit.score for hit in hits]
    low, high = min(scores, default=0.0), max(scores, default=0.0)
    if not all(math.isfinite(score) for score in scores):
        raise ValueError("convex fusion needs finite leg scores")
    if high == low:
        return [1.0] * len(scores)
    return [(score - low) / (high - low) for score in scores]


def convex(
    ranked_lists: Sequence[Sequence[Hit]],
    *,
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> list[FusedHit]:
    """Fuse ranked lists by a convex (weighted) sum of min-max normalised scores.

    Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS
    2023: ``score(d) = sum_i w_i * (s_i(d) - min_i) / (max_i - min_i)``, where ``min_i`` and
    ``max_i`` are the lowest and highest score of list ``i`` for this query and a chunk
    missing from list ``i`` contributes 0 there (it scores at most that list's minimum).

    Why min-max per list per query: BM25 scores have no upper bound and their range moves
    with the query's length and term rarity, while cosine scores of one model crowd a narrow
    band; scaling each list by its own range puts both on [0, 1] without per-model constants.
    Bruch et al. compare it with theoretical min-max (which needs a known lower bound per
    retriever) and z-score and find the convex combination, once its weight is tuned, at
    least as good as RRF in and out of domain: the weights are what a tenant tunes. Unlike
    RRF it uses the score gaps, so a leg that is sure of its top hit can outvote one that
    is not. Weights are relative: scaling all of them by one factor keeps the order.

    Lists follow :func:`rrf`'s rules (one ``Hit.source`` per list, distinct across lists,
    repeated chunks keep their first position, weight 0 drops the list); ties are broken by
    best single rank, then by ``chunk_id``.

    Raises:
        ValueError: As :func:`rrf`, and for a non-finite leg score.
    """
    resolved_weights = _check_arguments(ranked_lists, 0, weights, limit)
    return _fuse(
        ranked_lists, resolved_weights, limit, lambda weight, _, norm: weight * norm, normalise=_min_max
    )


def single_list(hits: Sequence[Hit], *, limit: int | None = None) -> list[FusedHit]:
    """Wrap one retriever's ranking as fused hits, for dense-only or lexical-only modes.

    The order of ``hits`` is kept (it is already a ranking) and each hit keeps its original
    score, which is therefore on that retriever's scale, not the RRF scale. A repeated
    chunk keeps its first position.

    Args:
        hits: One best-first list of hits of a single source.
        limit: Keep at most this many hits; ``None`` keeps all.

    Returns:
        Fused hits in the input order.

    Raises:
        ValueError: If ``hits`` mixes sources or ``limit`` is negative.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    _list_source(hits, 0)
    unique = _dedupe(hits)
    if limit is not None:
        unique = unique[:limit]
    return [
        FusedHit(
            chunk_id=hit.chunk_id,
            score=hit.score,
            stage_scores=MappingProxyType({hit.source: hit.score}),
            stage_ranks=MappingProxyType({hit.source: rank}),
        )
        for rank, hit in enumerate(unique, start=1)
    ]


def rerank_fusion(fused: Sequence[FusedHit], rerank_scores: Sequence[float], *, k: int) -> list[FusedHit]:
    """Blend a reranker's scores into a fused ranking by RRF over the two orders.

    The fused order and the order by ``rerank_scores`` (stable: equal scores keep the fused
    order) are fused with :func:`rrf` (Cormack et al. 2009), so the blended score is
    ``1 / (k + fused_rank) + 1 / (k + rerank_rank)``; a small ``k`` lets the top of either
    order dominate, a large one rewards agreement between them. Each hit keeps its
    ``stage_ranks`` and gains the reranker's score as ``stage_scores["rerank"]``.

    Args:
        fused: The first-stage ranking, best first, one hit per chunk.
        rerank_scores: The reranker's score of each hit of ``fused``, in the same order.
        k: The RRF smoothing constant.

    Returns:
        The hits of ``fused``, best first by the blended score.

    Raises:
        ValueError: If the lengths differ, ``fused`` repeats a chunk or ``k`` is negative.
    """
    if len(rerank_scores) != len(fused):
        raise ValueError(f"got {len(rerank_scores)} rerank scores for {len(fused)} hits")
    by_id = {hit.chunk_id: (hit, float(score)) for hit, score in zip(fused, rerank_scores, strict=True)}
    if len(by_id) != len(fused):
        raise ValueError("fused hits repeat a chunk")
    first = [Hit(hit.chunk_id, hit.score, "fused") for hit in fused]
    order = sorted(range(len(fused)), key=lambda i: -rerank_scores[i])
    second = [Hit(fused[i].chunk_id, float(rerank_scores[i]), "rerank") for i in order]
    blended = []
    for hit in rrf([first, second], k=k):
        original, score = by_id[hit.chunk_id]
        stage_scores = MappingProxyType({**original.stage_scores, "rerank": score})
        blended.append(FusedHit(hit.chunk_id, hit.score, stage_scores, original.stage_ranks))
    return blended
