"""The statistics of ``ragline tune``: the search grid, k-fold cross-validation over judged
queries and a bootstrap interval of the paired held-out difference. Pure functions over a
table of per-query scores (one row per setting), so every fold reuses one scoring pass.

Why cross-validate: with a few dozen judged queries the best of ~150 settings on those same
queries is optimistic (it also fits their noise). Each query is scored only by a setting
chosen without it, so the mean held-out difference estimates what tuning gains on queries it
has not seen, and the interval says whether that gain is distinguishable from zero.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from catalog.fusion import FusionOverride

RRF_KS = (10, 30, 60, 100)
# (dense, lexical): equal, and either leg down-weighted to 3/4, 1/2 and 1/4.
RRF_WEIGHTS = ((1.0, 1.0), (1.0, 0.75), (1.0, 0.5), (1.0, 0.25), (0.75, 1.0), (0.5, 1.0), (0.25, 1.0))
# Convex weights are relative (scaling both keeps the order): the dense share alone.
CONVEX_DENSE_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
DEPTH_FACTORS = (1, 2)  # each leg's candidates as multiples of the request's top_k


def grid(top_k: int) -> list[FusionOverride]:
    """Every setting ``ragline tune`` tries, in a fixed order (ties go to the earlier one).

    Candidate depths start at ``top_k``: a leg never fetches fewer than the request's
    ``top_k`` (``FusionConfig.depth``), so smaller depths would score the same as ``top_k``;
    a depth ``d`` chosen here serves any request of ``top_k <= d`` with the prefix of the
    ranking scored.
    """
    depths = [(top_k * a, top_k * b) for a in DEPTH_FACTORS for b in DEPTH_FACTORS]
    out = [
        FusionOverride("rrf", k, wd, wl, nd, nl)
        for k in RRF_KS
        for wd, wl in RRF_WEIGHTS
        for nd, nl in depths
    ]
    out += [
        FusionOverride("convex", None, share, round(1.0 - share, 6), nd, nl)
        for share in CONVEX_DENSE_SHARES
        for nd, nl in depths
    ]
    return out


def kfold(query_ids: Sequence[str], k: int, seed: int) -> list[list[str]]:
    """``k`` disjoint folds covering ``query_ids``, sizes differing by at most one: the ids
    sorted, shuffled by ``random.Random(seed)``, dealt round-robin. Deterministic for a seed
    whatever the input order.

    Raises:
        ValueError: ``k`` < 2 or more folds than queries.
    """
    if k < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got {k}")
    ids = sorted(set(query_ids))
    if len(ids) < k:
        raise ValueError(f"{len(ids)} judged queries cannot fill {k} folds")
    random.Random(seed).shuffle(ids)
    return [sorted(ids[i::k]) for i in range(k)]


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def best_setting(
    primary: Sequence[Sequence[float]],
    secondary: Sequence[Sequence[float]],
    columns: Sequence[int],
    rows: Sequence[int] | None = None,
) -> int:
    """The row (of ``rows``, all when None) with the highest mean ``primary`` (nDCG@10) over
    ``columns`` (query positions); ties by mean ``secondary`` (recall@100), then the lowest row
    (the grid's order)."""
    return max(
        range(len(primary)) if rows is None else rows,
        key=lambda row: (
            round(mean([primary[row][c] for c in columns]), 12),
            round(mean([secondary[row][c] for c in columns]), 12),
            -row,
        ),
    )


def bootstrap_interval(
    differences: Sequence[float], *, samples: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of paired per-query ``differences``
    (Efron & Tibshirani 1993, ch. 13): ``samples`` resamples with replacement drawn by
    ``random.Random(seed)``, so one input gives one interval.

    Raises:
        ValueError: no differences.
    """
    if not differences:
        raise ValueError("no differences to resample")
    rng = random.Random(seed)
    n = len(differences)
    means = sorted(mean([differences[rng.randrange(n)] for _ in range(n)]) for _ in range(samples))
    tail = (1.0 - level) / 2
    low = means[max(0, math.floor(tail * samples))]
    high = means[min(samples - 1, math.ceil((1.0 - tail) * samples) - 1)]
    return low, high


@dataclass(frozen=True, slots=True)
class FoldResult:
    fold: int
    queries: int
    chosen: int  # the row chosen on the other folds
    ndcg: float  # the chosen row's mean nDCG@10 on this (held-out) fold
    recall: float
    current_ndcg: float  # the current setting's, on the same queries
    current_recall: float


@dataclass(frozen=True, slots=True)
class CrossValidation:
    folds: list[FoldResult]
    ndcg_differences: list[float]  # per query (in ``query_ids`` order): held-out chosen - current
    recall_differences: list[float]
    final: int  # the row chosen on every judged query together: what would be applied
    interval: tuple[float, float]  # 95% bootstrap interval of the mean nDCG@10 difference
    recall_interval: tuple[float, float]


def cross_validate(
    ndcg: Sequence[Sequence[float]],
    recall: Sequence[Sequence[float]],
    current: int,
    query_ids: Sequence[str],
    *,
    k: int,
    seed: int,
    samples: int = 2000,
    choices: Sequence[int] | None = None,
) -> CrossValidation:
    """k-fold cross-validation of "pick the best row": per fold, the row best on the other
    folds against row ``current``, both scored on the fold held out.

    Args:
        ndcg: nDCG@10 per row (setting) and column (query, in ``query_ids`` order).
        recall: recall@100, the same shape.
        current: the row of the setting in use now.
        query_ids: the columns' query ids.
        k: folds; seed: their shuffle and the bootstrap's.
        choices: the rows a fold may choose (all when None): without ``current``, the
            held-out difference measures a trick always on, its parameters still chosen on
            the training folds.
    """
    position = {q: i for i, q in enumerate(query_ids)}
    folds = kfold(query_ids, k, seed)
    diff_n = [0.0] * len(query_ids)
    diff_r = [0.0] * len(query_ids)
    results = []
    for number, held in enumerate(folds):
        test = [position[q] for q in held]
        held_set = set(test)
        train = [c for c in range(len(query_ids)) if c not in held_set]
        chosen = best_setting(ndcg, recall, train, choices)
        for c in test:
            diff_n[c] = ndcg[chosen][c] - ndcg[current][c]
            diff_r[c] = recall[chosen][c] - recall[current][c]
        results.append(
            FoldResult(
                number,
                len(test),
                chosen,
                mean([ndcg[chosen][c] for c in test]),
                mean([recall[chosen][c] for c in test]),
                mean([ndcg[current][c] for c in test]),
                mean([recall[current][c] for c in test]),
            )
        )
    final = best_setting(ndcg, recall, list(range(len(query_ids))), choices)
    return CrossValidation(
        results,
        diff_n,
        diff_r,
        final,
        bootstrap_interval(diff_n, samples=samples, seed=seed),
        bootstrap_interval(diff_r, samples=samples, seed=seed),
    )
