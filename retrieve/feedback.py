"""Query-time tricks over one request's own candidates: pseudo-relevance feedback for each
leg (RM3 for BM25, Rocchio for dense) and same-document neighbour smoothing of a fused list.

Pure functions: the caller hands in what the request's first stage already found (the
feedback candidates came through the ACL masks of that request, so nothing here can reach a
chunk the caller may not read) and searches again with what comes back. ``bench/
query_tricks.py`` measures each against today's hybrid with cross-validation
(docs/benchmarks.md, "Query-time tricks").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from retrieve.fusion import FusedHit


@dataclass(frozen=True, slots=True)
class FeedbackDoc:
    """One feedback candidate: its index terms (as the lexical shard analyses text) and the
    first-stage score that weighs it."""

    terms: Sequence[str]
    score: float


def rm3_query(
    query_terms: Sequence[str], feedback: Sequence[FeedbackDoc], *, fb_terms: int, original_weight: float
) -> dict[str, float]:
    """The RM3 query model (Abdul-Jaleel et al., "UMass at TREC 2004", after Lavrenko & Croft,
    "Relevance-Based Language Models", SIGIR 2001), as Anserini computes it:

    ``P(t|R) = sum_d (s_d / sum s) * tf(t, d) / |d|`` over the feedback documents ``d`` with
    first-stage scores ``s_d`` (> 0), cut to the ``fb_terms`` heaviest terms (ties by term)
    and renormalised to sum 1; the result is ``original_weight * tf_q(t) / |q| +
    (1 - original_weight) * P(t|R)``. With no usable feedback it is the original query model.

    Raises:
        ValueError: ``original_weight`` outside [0, 1] or ``fb_terms`` < 0.
    """
    if not 0.0 <= original_weight <= 1.0:
        raise ValueError(f"original_weight must be in [0, 1], got {original_weight}")
    if fb_terms < 0:
        raise ValueError(f"fb_terms must be >= 0, got {fb_terms}")
    q_counts = Counter(query_terms)
    original = {t: c / len(query_terms) for t, c in q_counts.items()} if query_terms else {}
    docs = [d for d in feedback if d.score > 0 and d.terms]
    total = math.fsum(d.score for d in docs)
    relevance: dict[str, float] = {}
    for doc in docs:
        share = doc.score / total
        for term, tf in Counter(doc.terms).items():
            relevance[term] = relevance.get(term, 0.0) + share * tf / len(doc.terms)
    top = sorted(relevance.items(), key=lambda kv: (-kv[1], kv[0]))[:fb_terms]
    mass = math.fsum(w for _, w in top)
    if not top or mass <= 0:
        return original
    weight = 1.0 - original_weight if original else 1.0
    out = {t: original_weight * w for t, w in original.items()}
    for term, w in top:
        out[term] = out.get(term, 0.0) + weight * w / mass
    return out


def rocchio(query: np.ndarray, feedback: Sequence[np.ndarray], *, alpha: float, beta: float) -> np.ndarray:
    """Rocchio's feedback (Rocchio 1971; as in Manning et al., IR book, section 9.1.1) with
    positive feedback only: ``q' = alpha * q + beta * mean(feedback)``, scaled to unit length
    (the index scores by inner product of normalised vectors, so only the direction counts).
    No feedback returns ``query`` unchanged (as float32).

    Raises:
        ValueError: a negative ``alpha`` or ``beta``, or a zero result.
    """
    if alpha < 0 or beta < 0:
        raise ValueError(f"alpha and beta must be >= 0, got {alpha}, {beta}")
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    if not feedback:
        return q
    moved = alpha * q + beta * np.mean(
        np.stack([np.asarray(v, np.float32).reshape(-1) for v in feedback]), axis=0
    )
    norm = float(np.linalg.norm(moved))
    if norm == 0.0:
        raise ValueError("Rocchio moved the query to the zero vector")
    return (moved / norm).astype(np.float32)


def neighbour_boost(
    fused: Sequence[FusedHit], spans: Mapping[int, tuple[int, int]], *, weight: float
) -> list[FusedHit]:
    """Smooth each chunk's fused score with its neighbours': ``score'(c) = score(c) + weight *
    (score(prev) + score(next))``, where prev and next are the chunks of the same document
    just before and after ``c`` (by start offset) among the fused candidates themselves (a
    chunk that is not a candidate adds nothing). ``spans`` maps chunk row to (document id,
    start offset); hits without a span keep their score. Re-sorted as fusion sorts (score,
    best single rank, chunk id); the hits are those of ``fused``, none added.

    Raises:
        ValueError: a negative ``weight``.
    """
    if weight < 0:
        raise ValueError(f"weight must be >= 0, got {weight}")
    score = {h.chunk_id: h.score for h in fused}
    by_doc: dict[int, list[tuple[int, int]]] = {}
    for h in fused:
        if h.chunk_id in spans:
            doc, start = spans[h.chunk_id]
            by_doc.setdefault(doc, []).append((start, h.chunk_id))
    bonus: dict[int, float] = {}
    for chunks in by_doc.values():
        chunks.sort()
        for i, (_, row) in enumerate(chunks):
            near = [chunks[j][1] for j in (i - 1, i + 1) if 0 <= j < len(chunks)]
            bonus[row] = weight * math.fsum(score[n] for n in near)
    out = [
        FusedHit(
            h.chunk_id,
            h.score + bonus.get(h.chunk_id, 0.0),
            MappingProxyType(dict(h.stage_scores)),
            h.stage_ranks,
        )
        for h in fused
    ]
    out.sort(key=lambda h: (-h.score, h.best_rank, h.chunk_id))
    return out
