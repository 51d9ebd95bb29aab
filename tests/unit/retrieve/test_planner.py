"""The filter-aware planner: strategy choice, allowed-only results, recall at every selectivity."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index.faiss_shards import DenseKind, DenseShard, exact_search
from retrieve.planner import SearchPlan, plan_search, search_shard
from tests.factories import dense

faiss.omp_set_num_threads(1)
N, DIM = 4000, 32
THRESHOLDS = {
    "exact_max_fraction": 0.02,
    "overfetch_min_fraction": 0.5,
    "base_ef_search": 64,
    "base_nprobe": 8,
}


def _plan(
    n_allowed: int, n_total: int = 100_000, kind: DenseKind = "hnsw", exact_max_allowed: int = 500
) -> SearchPlan:
    return plan_search(
        n_allowed=n_allowed,
        n_total=n_total,
        k=10,
        kind=kind,
        exact_max_allowed=exact_max_allowed,
        exact_max_fraction=0.02,
        overfetch_min_fraction=0.5,
        base_ef_search=64,
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


def test_strategy_choice_by_selectivity() -> None:
    assert _plan(100_000).strategy == "unfiltered"
    over = _plan(80_000)
    assert over.strategy == "overfetch" and over.fetch_k == 25 and over.ef_search is not None
    mid = _plan(20_000)
    assert mid.strategy == "filtered" and mid.ef_search == 320 and mid.nprobe == 40
    assert _plan(2_000).strategy == "exact"  # 2%: fraction threshold
    assert _plan(400, n_total=1000).strategy == "exact"  # 400 <= exact_max_allowed
    assert _plan(0).strategy == "exact" and _plan(5, n_total=0).strategy == "exact"
    assert _plan(30_000, kind="flat").strategy == "exact"
    assert _plan(100_000, kind="flat").strategy == "unfiltered"
    assert _plan(3_000, exact_max_allowed=0).ef_search == 2048  # capped


@pytest.mark.parametrize("fraction", [1.0, 0.6, 0.1, 0.01, 0.001, 0.00025])
def test_recall_target_at_every_selectivity(shard: DenseShard, corpus: np.ndarray, fraction: float) -> None:
    rng = np.random.default_rng(int(fraction * 1e5))
    allowed = np.zeros(N, dtype=bool)
    allowed[rng.choice(N, size=max(1, round(fraction * N)), replace=False)] = True
    queries = _clustered(30, 2)
    _, truth = exact_search(corpus, queries, 10, allowed)
    plan = _plan(int(allowed.sum()), n_total=N, exact_max_allowed=20)
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
    exact_max_allowed=st.sampled_from([0, 50, 5000]),
)
def test_results_are_always_a_subset_of_allowed(
    shard: DenseShard, fraction: float, seed: int, k: int, exact_max_allowed: int
) -> None:
    rng = np.random.default_rng(seed)
    allowed = rng.random(N) < fraction
    plan = _plan(int(allowed.sum()), n_total=N, exact_max_allowed=exact_max_allowed)
    scores, found = search_shard(shard, _clustered(3, seed), k, allowed, plan)
    assert found.shape == (3, k)
    assert allowed[found[found >= 0]].all()
    assert ((found >= 0).sum(axis=1) == min(k, int(allowed.sum()))).all()
    assert np.isneginf(scores[found < 0]).all()
