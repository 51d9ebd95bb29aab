"""The filter-aware planner: choice from measured costs, allowed-only results, recall at every selectivity."""

from __future__ import annotations

import math
from pathlib import Path

import faiss
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index.faiss_shards import DenseKind, DenseShard, exact_search
from index.search_costs import ShardCosts, calibrate, costs_of
from retrieve.planner import FILTERED_MIN_FRACTION, SearchPlan, plan_search, search_shard
from tests.factories import dense

faiss.omp_set_num_threads(1)
N, DIM = 4000, 32
# Pinned costs (ms per query) shaped like a 100k x 384 HNSW shard on the bench machine:
# exact ~0.08 us per allowed row, a graph search ~0.2 ms + 7 us per unit of efSearch.
MEASURED = ShardCosts(
    exact_fixed_ms=0.05,
    exact_per_row_ms=0.00008,
    graph_fixed_ms=0.2,
    graph_per_unit_ms=0.007,
    filter_factor=1.2,
)
# A shard whose exact scan is slow (cold memory-mapped vectors) and whose graph is cheap.
SLOW_EXACT = ShardCosts(
    exact_fixed_ms=0.05, exact_per_row_ms=0.01, graph_fixed_ms=0.1, graph_per_unit_ms=0.001, filter_factor=1.0
)
COST_PROFILES = (MEASURED, SLOW_EXACT, ShardCosts(0.0, 0.0, 0.0, 0.0, 1.0))


def _plan(
    n_allowed: int,
    n_total: int = 100_000,
    kind: DenseKind = "hnsw",
    costs: ShardCosts = MEASURED,
    k: int = 10,
    base_ef_search: int = 64,
) -> SearchPlan:
    return plan_search(
        n_allowed=n_allowed,
        n_total=n_total,
        k=k,
        kind=kind,
        costs=costs,
        base_ef_search=base_ef_search,
        base_nprobe=8,
    )


def _clustered(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((30, DIM)).astype(np.float32)
    x = centres[rng.integers(0, 30, n)] + 0.4 * rng.standard_normal((n, DIM)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    return _clustered(N, 1)


@pytest.fixture(scope="module")
def shard(corpus: np.ndarray) -> DenseShard:
    return DenseShard.build(corpus, np.arange(N), dense(kind="hnsw", hnsw_m=16, ef_construction=80))


def test_choice_follows_the_measured_costs() -> None:
    assert _plan(100_000).strategy == "unfiltered"
    # 50%: over-fetching 40 (ef 80, 0.76 ms) beats filtered ef=128 (1.3 ms) and exact over 50k (4 ms).
    half = _plan(50_000)
    assert (half.strategy, half.fetch_k, half.ef_search) == ("overfetch", 40, 80)
    assert half.predicted_ms == pytest.approx(0.2 + 0.007 * 80)
    # 10%: exact over 10k rows (0.85 ms) beats over-fetching 200 (ef 400, 3 ms).
    assert _plan(10_000).strategy == "exact"
    # The same filter on a shard whose exact scan is slow: the graph wins.
    assert _plan(10_000, costs=SLOW_EXACT).strategy == "overfetch"
    # k=50 at 20%: filtered ef=320 is cheaper than over-fetching 500 (ef 1000).
    wide = _plan(20_000, costs=SLOW_EXACT, k=50)
    assert (wide.strategy, wide.ef_search) == ("filtered", 320)


def test_narrow_filters_stay_exact_however_cheap_the_graph() -> None:
    # Filtered HNSW recall collapses below FILTERED_MIN_FRACTION and over-fetch would need an
    # efSearch beyond the cap: no cost makes either eligible.
    free_graph = ShardCosts(0.0, 1.0, 0.0, 0.0, 1.0)
    for n_allowed in (1_000, 100, 10, 1):
        assert _plan(n_allowed, costs=free_graph).strategy == "exact"
    assert FILTERED_MIN_FRACTION * 100_000 > 1_000


def test_flat_empty_and_ivfpq_plans() -> None:
    assert _plan(0).strategy == "exact" and _plan(5, n_total=0).strategy == "exact"
    assert _plan(30_000, kind="flat", costs=SLOW_EXACT).strategy == "exact"
    assert _plan(100_000, kind="flat").strategy == "unfiltered"
    ivf = _plan(20_000, kind="ivfpq", costs=SLOW_EXACT)
    assert (ivf.strategy, ivf.nprobe) == ("filtered", 40)
    assert _plan(2_000, kind="ivfpq", costs=SLOW_EXACT).nprobe == 400
    assert _plan(90, kind="ivfpq", costs=ShardCosts(0.0, 1.0, 0.1, 0.001, 1.0)).nprobe == 1024  # capped


def test_exact_path_equals_brute_force_with_a_selector(corpus: np.ndarray, tmp_path: Path) -> None:
    # Real FAISS shards of every kind, the allowed rows scored in place, including memory-mapped.
    allowed = np.random.default_rng(5).random(N) < 0.03
    queries = _clustered(7, 3)
    scored = queries @ corpus[allowed].T
    want = np.flatnonzero(allowed)[np.argsort(-scored, axis=1, kind="stable")[:, :10]]
    flat = DenseShard.build(corpus, np.arange(N), dense(kind="flat"))
    flat.save(tmp_path)
    for shard in (flat, DenseShard.load(tmp_path, mmap=True)):
        scores, found = shard.search(queries, 10, allowed=allowed, strategy="exact")
        np.testing.assert_array_equal(found, want)
        np.testing.assert_allclose(scores, np.sort(scored, axis=1)[:, ::-1][:, :10], rtol=1e-5)
    # Fewer allowed rows than k: padded, never a disallowed row.
    few = np.zeros(N, dtype=bool)
    few[[3, 99]] = True
    scores, found = flat.search(queries, 5, allowed=few, strategy="exact")
    assert set(found[:, :2].ravel()) <= {3, 99} and (found[:, 2:] == -1).all()
    assert np.isneginf(scores[:, 2:]).all()


def test_calibration_measures_and_caches(shard: DenseShard) -> None:
    costs = calibrate(shard)
    assert costs.exact_per_row_ms > 0 and costs.graph_ms(64) > 0 and costs.filter_factor >= 1.0
    assert all(
        math.isfinite(v) for v in (costs.exact_fixed_ms, costs.graph_fixed_ms, costs.graph_per_unit_ms)
    )
    assert costs_of(shard) is costs_of(shard)
    empty = DenseShard.build(np.zeros((0, DIM), np.float32), np.zeros(0, np.int64), dense(kind="flat"))
    assert calibrate(empty).exact_ms(0) == 0.0


@pytest.mark.parametrize("fraction", [1.0, 0.6, 0.1, 0.01, 0.001, 0.00025])
def test_recall_target_at_every_selectivity(shard: DenseShard, corpus: np.ndarray, fraction: float) -> None:
    rng = np.random.default_rng(int(fraction * 1e5))
    allowed = np.zeros(N, dtype=bool)
    allowed[rng.choice(N, size=max(1, round(fraction * N)), replace=False)] = True
    queries = _clustered(30, 2)
    _, truth = exact_search(corpus, queries, 10, allowed)
    # The shard's own measured costs, as a server plans; and every profile, so each
    # strategy the planner can choose is held to the target.
    for costs in (costs_of(shard), *COST_PROFILES):
        plan = _plan(int(allowed.sum()), n_total=N, costs=costs, base_ef_search=32)
        _, found = search_shard(shard, queries, 10, allowed, plan)
        hits = [
            len(set(f[f >= 0]) & set(t[t >= 0])) / max(1, (t >= 0).sum())
            for f, t in zip(found, truth, strict=True)
        ]
        assert np.mean(hits) >= 0.95, plan


def test_short_overfetch_falls_back_to_exact(shard: DenseShard, corpus: np.ndarray) -> None:
    allowed = np.zeros(N, dtype=bool)
    allowed[:40] = True
    # A deliberately bad plan: unfiltered top-10 will almost never hold 10 of these 40.
    plan = SearchPlan("overfetch", 64, None, 10, 40, N)
    _, found = search_shard(shard, corpus[3000:3005], 10, allowed, plan)
    assert (found >= 0).all() and allowed[found].all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fraction=st.floats(min_value=0.0, max_value=1.0),
    seed=st.integers(0, 2**16),
    k=st.integers(1, 30),
    costs=st.sampled_from(COST_PROFILES),
)
def test_results_are_always_a_subset_of_allowed(
    shard: DenseShard, fraction: float, seed: int, k: int, costs: ShardCosts
) -> None:
    rng = np.random.default_rng(seed)
    allowed = rng.random(N) < fraction
    plan = _plan(int(allowed.sum()), n_total=N, costs=costs, k=k)
    scores, found = search_shard(shard, _clustered(3, seed), k, allowed, plan)
    assert found.shape == (3, k)
    assert allowed[found[found >= 0]].all()
    assert ((found >= 0).sum(axis=1) == min(k, int(allowed.sum()))).all()
    assert np.isneginf(scores[found < 0]).all()
