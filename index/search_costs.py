"""Measured search costs of one dense shard, so the planner compares milliseconds, not rules.

Which filtered-search strategy is cheapest depends on the machine (memory bandwidth, BLAS,
SIMD width), the shard (size, dimension, kind, graph degree) and the filter: fixed
selectivity thresholds tuned on one machine were 2-4x off on another. So each shard is timed
once when it loads (``costs_of``): a few searches of its own vectors through the exact path
(at two allowed-set sizes) and through FAISS (at two efSearch / nprobe values, unfiltered
and with a selector), each fitted to a line. The planner then prices every strategy with
the parameters its recall needs and takes the cheapest.

The cost is a property of the shard object in this process: cached per shard (weakly, so a
swapped-out version is not kept alive) and never persisted, since it is only valid on the
machine that measured it.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from index.faiss_shards import DenseShard, Strategy

# Queries per timed measurement; the smallest of REPEATS rounds is kept (a shared machine's
# noise only ever adds time).
SAMPLES = 8
REPEATS = 3
# Allowed-set sizes the exact path is timed at: small enough to stay a few ms per shard.
EXACT_SMALL, EXACT_LARGE = 256, 8192
CALIBRATION_K = 10


@dataclass(frozen=True, slots=True)
class ShardCosts:
    """Per-query milliseconds of one shard's search paths, as straight lines.

    Attributes:
        exact_fixed_ms: exact search's cost with no allowed row (mask scan, set-up).
        exact_per_row_ms: exact search's cost per allowed row scored.
        graph_fixed_ms: FAISS search's intercept (HNSW entry descent, IVF coarse step).
        graph_per_unit_ms: FAISS search's cost per unit of efSearch (HNSW) or nprobe (IVF).
        filter_factor: filtered traversal's cost over unfiltered at the same efSearch /
            nprobe (the selector check and the extra nodes it makes the search expand).
    """

    exact_fixed_ms: float
    exact_per_row_ms: float
    graph_fixed_ms: float
    graph_per_unit_ms: float
    filter_factor: float

    def exact_ms(self, rows: int) -> float:
        return self.exact_fixed_ms + self.exact_per_row_ms * rows

    def graph_ms(self, units: int, *, filtered: bool = False) -> float:
        cost = self.graph_fixed_ms + self.graph_per_unit_ms * units
        return cost * self.filter_factor if filtered else cost


_cache: weakref.WeakKeyDictionary[DenseShard, ShardCosts] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def costs_of(shard: DenseShard) -> ShardCosts:
    """The shard's measured costs, calibrating it on first use (serving does so at load)."""
    with _lock:
        found = _cache.get(shard)
        if found is None:
            found = _cache[shard] = calibrate(shard)
    return found


def calibrate(shard: DenseShard, *, seed: int = 0) -> ShardCosts:
    """Time the shard's exact and FAISS paths on a few of its own vectors (tens of ms at 100k).

    Args:
        shard: the loaded shard.
        seed: picks the sample queries and the calibration masks.

    Returns:
        The fitted costs; an empty shard costs nothing.
    """
    n = shard.ntotal
    if n == 0:
        return ShardCosts(0.0, 0.0, 0.0, 0.0, 1.0)
    rng = np.random.default_rng(seed)
    queries = _sample_queries(shard, rng)
    small, large = min(EXACT_SMALL, n), min(EXACT_LARGE, n)
    exact_small = _time(shard, queries, _mask(n, small, rng), "exact")
    exact_large = _time(shard, queries, _mask(n, large, rng), "exact")
    per_row, fixed = _line(small, exact_small, large, exact_large)
    if shard.kind == "flat":  # FAISS on a flat shard is the same scan as the exact path
        return ShardCosts(fixed, per_row, fixed + per_row * n, 0.0, 1.0)
    lo = shard.params.ef_search if shard.kind == "hnsw" else shard.params.nprobe
    hi = 4 * lo if shard.kind == "hnsw" else min(4 * lo, shard.params.nlist)
    graph_lo = _time(shard, queries, None, "unfiltered", units=lo)
    graph_hi = _time(shard, queries, None, "unfiltered", units=hi) if hi > lo else graph_lo
    per_unit, intercept = _line(lo, graph_lo, hi, graph_hi)
    half = _time(shard, queries, _mask(n, max(1, n // 2), rng), "filtered", units=lo)
    factor = max(1.0, half / graph_lo) if graph_lo > 0 else 1.0
    return ShardCosts(fixed, per_row, intercept, per_unit, factor)


def _sample_queries(shard: DenseShard, rng: np.random.Generator) -> np.ndarray:
    """Stored vectors, perturbed so that no query is its own nearest neighbour exactly."""
    picks = rng.choice(shard.ntotal, size=min(SAMPLES, shard.ntotal), replace=False)
    base = np.asarray(shard.vectors[np.sort(picks)], dtype=np.float32)
    noisy = base + 0.05 * rng.standard_normal(base.shape).astype(np.float32)
    return noisy / np.maximum(np.linalg.norm(noisy, axis=1, keepdims=True), 1e-12)


def _mask(n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[rng.choice(n, size=count, replace=False)] = True
    return mask


def _time(
    shard: DenseShard, queries: np.ndarray, allowed: np.ndarray | None, strategy: Strategy, units: int = 0
) -> float:
    """Milliseconds per query of one strategy, one query at a time (as a request runs)."""
    ef = units if shard.kind == "hnsw" and units else None
    nprobe = units if shard.kind == "ivfpq" and units else None

    def one(q: np.ndarray) -> object:
        return shard.search(
            q,
            CALIBRATION_K,
            allowed=allowed,
            strategy=strategy,
            ef_search=ef,
            nprobe=nprobe,
        )

    return _best_of(lambda: [one(queries[i : i + 1]) for i in range(len(queries))]) / len(queries)


def _best_of(run: Callable[[], object]) -> float:
    run()  # the first round pages the index in; it is not a steady-state request
    best = math.inf
    for _ in range(REPEATS):
        started = time.perf_counter()
        run()
        best = min(best, (time.perf_counter() - started) * 1000)
    return best


def _line(x0: int, y0: float, x1: int, y1: float) -> tuple[float, float]:
    """(slope, intercept) through two timings, both clamped at 0 (noise can tilt a line)."""
    slope = max(0.0, (y1 - y0) / (x1 - x0)) if x1 > x0 else 0.0
    return slope, max(0.0, y0 - slope * x0)
