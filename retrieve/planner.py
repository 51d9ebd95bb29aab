"""Filter-aware dense search planning: per shard, the cheapest strategy that keeps recall.

Each strategy is given the parameters its recall needs, then priced with the shard's
measured costs (``index.search_costs``: exact per allowed row, FAISS per efSearch/nprobe,
timed when the shard loads), and the cheapest wins:

- **exact**: every allowed row scored in place; exact, cost linear in ``n_allowed``;
- **overfetch**: an unfiltered search for ``fetch_k = ceil(k / fraction * OVERFETCH_SAFETY)``
  candidates, then the mask. Its recall is the graph's recall at depth ``fetch_k`` whatever
  the filter (a higher-scoring allowed row would be among the fetched), so efSearch is
  ``max(base, 2 * fetch_k)``; eligible while that fits under ``EF_SEARCH_CAP``;
- **filtered**: FAISS traversal with an ``IDSelectorBitmap`` and efSearch / nprobe raised to
  ``base / fraction``, which keeps the number of *allowed* nodes visited about constant.
  HNSW recall collapses on narrow filters even so (0.35 at 0.01% allowed with efSearch
  2048: the allowed nodes stop being connected through the graph), so HNSW traversal is
  eligible only at fractions >= ``FILTERED_MIN_FRACTION`` and while the raised efSearch is
  not capped;
- flat shards are exact either way: unfiltered when everything passes, else exact.

``search_shard`` executes a plan and never returns fewer than ``min(k, n_allowed)`` hits:
a graph search that comes back short is repeated exactly for the short queries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from index.faiss_shards import DenseKind, DenseShard, Strategy
from index.search_costs import ShardCosts

# Unfiltered candidates fetched per expected allowed hit; 2x keeps P(short) negligible at
# fractions >= 0.5 and covers the graph's own misses near the k-th result.
OVERFETCH_SAFETY = 2.0
EF_SEARCH_CAP = 2048
NPROBE_CAP = 1024
# Below this allowed fraction filtered HNSW traversal is never planned, whatever it costs
# (bench/filtered.py, 100k vectors: recall@10 0.75 at 1% with the base efSearch, 0.35 at
# 0.01% even at efSearch 2048).
FILTERED_MIN_FRACTION = 0.02
# IVF-PQ over-fetch: at most this many candidates per wanted hit, each refined ~this often.
IVF_OVERFETCH_MAX_FACTOR = 4
IVF_REFINE_FACTOR_ESTIMATE = 4


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """How one shard is searched for one filter, and the cost the planner predicted."""

    strategy: Strategy
    ef_search: int | None
    nprobe: int | None
    fetch_k: int | None
    allowed_count: int
    total: int
    predicted_ms: float = 0.0

    @property
    def fraction(self) -> float:
        return self.allowed_count / self.total if self.total else 0.0

    def describe(self) -> str:
        """One line for logs, explain output and the bench: the strategy and its knobs."""
        knobs = {"ef": self.ef_search, "nprobe": self.nprobe, "fetch_k": self.fetch_k}
        shown = [f"{name}={value}" for name, value in knobs.items() if value is not None]
        return " ".join([self.strategy, *shown, f"~{self.predicted_ms:.2f}ms"])


def plan_search(
    *,
    n_allowed: int,
    n_total: int,
    k: int,
    kind: DenseKind,
    costs: ShardCosts,
    base_ef_search: int,
    base_nprobe: int,
) -> SearchPlan:
    """Choose the cheapest recall-keeping strategy for a shard given its allowed count.

    Args:
        n_allowed: allowed positions in the shard.
        n_total: vectors in the shard.
        k: results wanted.
        kind: the shard's index kind.
        costs: the shard's measured costs (``index.search_costs.costs_of``).
        base_ef_search: HNSW efSearch for an unfiltered search.
        base_nprobe: IVF nprobe for an unfiltered search.

    Returns:
        The plan, with the cost it was chosen for.
    """
    n_allowed = max(0, min(n_allowed, n_total))
    if n_total == 0 or n_allowed == 0:
        return SearchPlan("exact", None, None, None, n_allowed, n_total)
    if n_allowed == n_total:
        units = base_ef_search if kind == "hnsw" else base_nprobe
        cost = costs.exact_ms(n_total) if kind == "flat" else costs.graph_ms(units)
        return SearchPlan("unfiltered", base_ef_search, base_nprobe, k, n_allowed, n_total, cost)
    exact = SearchPlan("exact", None, None, None, n_allowed, n_total, costs.exact_ms(n_allowed))
    if kind == "flat":
        return exact
    options = [exact, *_graph_options(n_allowed, n_total, k, kind, costs, base_ef_search, base_nprobe)]
    # min keeps the first of equals: exact wins a tie (it is exact).
    return min(options, key=lambda plan: plan.predicted_ms)


def _graph_options(
    n_allowed: int, n_total: int, k: int, kind: DenseKind, costs: ShardCosts, base_ef: int, base_nprobe: int
) -> list[SearchPlan]:
    """Over-fetch and filtered traversal, each with the parameters its recall needs."""
    fraction = n_allowed / n_total
    fetch_k = min(n_total, math.ceil(k / fraction * OVERFETCH_SAFETY))
    options: list[SearchPlan] = []
    if kind == "hnsw":
        over_ef = max(base_ef, 2 * fetch_k)
        if over_ef <= EF_SEARCH_CAP:
            cost = costs.graph_ms(over_ef)
            options.append(SearchPlan("overfetch", over_ef, None, fetch_k, n_allowed, n_total, cost))
        ef = max(k, _scaled(base_ef, fraction))
        if fraction >= FILTERED_MIN_FRACTION and ef <= EF_SEARCH_CAP:
            cost = costs.graph_ms(ef, filtered=True)
            options.append(SearchPlan("filtered", ef, None, None, n_allowed, n_total, cost))
        return options
    # IVF-PQ: lists are scanned whole and the selector drops codes, so a raised nprobe keeps
    # recall at any fraction (the calibration's timings include refining k candidates).
    nprobe = min(NPROBE_CAP, _scaled(base_nprobe, fraction))
    filtered = costs.graph_ms(nprobe, filtered=True)
    options.append(SearchPlan("filtered", None, nprobe, None, n_allowed, n_total, filtered))
    # PQ ranks a deep unfiltered list poorly, so over-fetch stays shallow (<= 4k candidates);
    # each extra candidate is refined against its raw row.
    if fetch_k <= IVF_OVERFETCH_MAX_FACTOR * k:
        extra = costs.exact_per_row_ms * (fetch_k - k) * IVF_REFINE_FACTOR_ESTIMATE
        over = SearchPlan(
            "overfetch", None, nprobe, fetch_k, n_allowed, n_total, costs.graph_ms(nprobe) + extra
        )
        options.append(over)
    return options


def _scaled(base: int, fraction: float) -> int:
    """base / fraction: keeps the number of *allowed* nodes or codes visited about constant."""
    return max(base, math.ceil(base / fraction))


def search_shard(
    shard: DenseShard, queries: np.ndarray, k: int, allowed: np.ndarray | None, plan: SearchPlan
) -> tuple[np.ndarray, np.ndarray]:
    """Run ``plan`` on ``shard``; queries that come back short are retried exactly.

    Args:
        shard: the dense shard.
        queries: (q, d) float32.
        k: results per query.
        allowed: bool mask over the shard's positions (None = all).
        plan: from ``plan_search`` for this shard and mask.

    Returns:
        (q, k) float32 scores and (q, k) int64 positions, -inf / -1 padded; every position
        is allowed, and each query has ``min(k, n_allowed)`` hits.
    """
    scores, positions = shard.search(
        queries,
        k,
        allowed=allowed,
        strategy=plan.strategy,
        ef_search=plan.ef_search,
        nprobe=plan.nprobe,
        fetch_k=plan.fetch_k,
    )
    if plan.strategy == "exact":
        return scores, positions
    n_allowed = shard.ntotal if allowed is None else int(np.count_nonzero(allowed))
    short = np.flatnonzero((positions >= 0).sum(axis=1) < min(k, n_allowed))
    if len(short):
        redo_s, redo_p = shard.search(queries[short], k, allowed=allowed, strategy="exact")
        scores[short], positions[short] = redo_s, redo_p
    return scores, positions
