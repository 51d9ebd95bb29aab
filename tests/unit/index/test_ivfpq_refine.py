"""IVF-PQ with exact refinement: exact top-k when the pool is wide enough, ACL masks, persistence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.errors import InvalidInputError
from core.settings import Settings
from index.builder import assign_shards
from index.faiss_shards import META_FILE, DenseShard, Strategy, choose_kind, exact_search
from index.search_costs import ShardCosts
from retrieve.planner import plan_search, search_shard
from tests.factories import dense
from tests.unit.index.conftest import N, recall
from wiring import dense_params

K = 10
NLIST = 16
# Wide refinement: 10 * 40 = 400 PQ candidates out of 3,000 are re-scored exactly.
REFINED = dense(kind="ivfpq", nlist=NLIST, nprobe=4, pq_m=8, pq_nbits=6, refine=True, refine_factor=40)


@pytest.fixture(scope="module")
def ivfpq(corpus: np.ndarray) -> DenseShard:
    shard = DenseShard.build(corpus, np.arange(N, dtype=np.int64), REFINED)
    assert shard.kind == "ivfpq", shard.fallback_reason
    return shard


def test_refine_at_full_nprobe_returns_the_exact_top_k(
    ivfpq: DenseShard, corpus: np.ndarray, queries: np.ndarray
) -> None:
    truth_s, truth = exact_search(corpus, queries, K)
    scores, found = ivfpq.search(queries, K, allowed=None, strategy="unfiltered", nprobe=NLIST)
    np.testing.assert_array_equal(found, truth)
    np.testing.assert_allclose(scores, truth_s, rtol=1e-5, atol=1e-6)


def test_refined_scores_are_exact_inner_products(
    ivfpq: DenseShard, corpus: np.ndarray, queries: np.ndarray
) -> None:
    scores, found = ivfpq.search(queries, K, allowed=None, strategy="unfiltered")
    expected = np.einsum("qd,qkd->qk", queries, corpus[found])
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)


def test_refine_beats_the_pq_scores_alone(ivfpq: DenseShard, corpus: np.ndarray, queries: np.ndarray) -> None:
    _, truth = exact_search(corpus, queries, K)
    _, pq_only = ivfpq.search(queries, K, allowed=None, strategy="unfiltered", nprobe=NLIST, refine_factor=1)
    _, refined = ivfpq.search(queries, K, allowed=None, strategy="unfiltered", nprobe=NLIST)
    assert recall(refined, truth) == 1.0
    assert recall(pq_only, truth) < recall(refined, truth)


@pytest.mark.parametrize("strategy", ["filtered", "overfetch", "unfiltered"])
def test_acl_mask_is_respected_even_for_the_nearest_vectors(
    ivfpq: DenseShard, corpus: np.ndarray, strategy: Strategy
) -> None:
    # Queries are stored vectors the caller may not read: their own row is the best match,
    # refined to an exact score of 1.0, and must still never come back.
    denied = np.arange(0, N, 7)
    allowed = np.ones(N, dtype=bool)
    allowed[denied] = False
    queries = corpus[denied[:40]]
    scores, found = ivfpq.search(queries, K, allowed=allowed, strategy=strategy, nprobe=NLIST, fetch_k=4 * K)
    hits = found[found >= 0]
    assert len(hits) > 0
    assert allowed[hits].all()
    assert not np.isin(hits, denied).any()
    assert np.all(np.isneginf(scores[found < 0]))


@pytest.mark.parametrize("fraction", [0.5, 0.2, 0.02])
def test_planner_over_ivfpq_matches_exact_filtered_search(
    ivfpq: DenseShard, corpus: np.ndarray, queries: np.ndarray, fraction: float
) -> None:
    allowed = np.random.default_rng(11).random(N) < fraction
    plan = plan_search(
        n_allowed=int(allowed.sum()),
        n_total=N,
        k=K,
        kind="ivfpq",
        # Exact priced out, so the test holds IVF-PQ's filtered traversal to the target.
        costs=ShardCosts(
            exact_fixed_ms=1e3,
            exact_per_row_ms=0.0,
            graph_fixed_ms=0.1,
            graph_per_unit_ms=0.01,
            filter_factor=1.0,
        ),
        base_ef_search=64,
        base_nprobe=ivfpq.params.nprobe,
    )
    assert plan.strategy == "filtered"
    _, truth = exact_search(corpus, queries, K, allowed)
    _, found = search_shard(ivfpq, queries, K, allowed, plan)
    assert allowed[found[found >= 0]].all()
    assert recall(found, truth) >= 0.95


def test_save_load_round_trip_keeps_refinement(
    ivfpq: DenseShard, queries: np.ndarray, tmp_path: Path
) -> None:
    ivfpq.save(tmp_path)
    loaded = DenseShard.load(tmp_path)
    assert loaded.kind == "ivfpq"
    assert loaded.params == ivfpq.params
    before = ivfpq.search(queries, K, allowed=None, strategy="unfiltered")
    after = loaded.search(queries, K, allowed=None, strategy="unfiltered")
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_allclose(before[0], after[0], rtol=1e-6)


def test_shard_saved_without_a_refine_factor_loads_with_the_old_default(
    ivfpq: DenseShard, queries: np.ndarray, tmp_path: Path
) -> None:
    ivfpq.save(tmp_path)
    meta = json.loads((tmp_path / META_FILE).read_text(encoding="utf-8"))
    del meta["params"]["refine_factor"]
    (tmp_path / META_FILE).write_text(json.dumps(meta), encoding="utf-8")
    loaded = DenseShard.load(tmp_path)
    assert loaded.params.refine_factor == 4
    _, found = loaded.search(queries, K, allowed=None, strategy="unfiltered")
    assert found.shape == (len(queries), K) and (found >= 0).all()


def test_bad_refine_factor_is_rejected(ivfpq: DenseShard, queries: np.ndarray) -> None:
    with pytest.raises(InvalidInputError):
        ivfpq.search(queries, K, allowed=None, strategy="unfiltered", refine_factor=0)


def test_refine_factor_setting_reaches_the_shard_params(monkeypatch: pytest.MonkeyPatch) -> None:
    assert dense_params(Settings()).refine_factor == Settings().index.ivf_refine_factor
    monkeypatch.setenv("RAGLINE_INDEX__IVF_REFINE_FACTOR", "24")
    assert dense_params(Settings()).refine_factor == 24


def test_refine_pool_never_exceeds_the_shard(corpus: np.ndarray) -> None:
    small = corpus[: NLIST * 64 * 39 // 16]
    shard = DenseShard.build(
        small, np.arange(len(small)), dense(kind="ivfpq", nlist=NLIST, pq_m=8, pq_nbits=6)
    )
    assert shard.kind == "ivfpq", shard.fallback_reason
    # 10 * 256 candidates > 2,496 vectors: the pool is the whole shard (every list probed).
    _, found = shard.search(
        small[:3], K, allowed=None, strategy="unfiltered", nprobe=NLIST, refine_factor=256
    )
    np.testing.assert_array_equal(found, exact_search(small, small[:3], K)[1])


def test_default_policy_serves_a_million_chunks_on_the_default_shards_with_ivfpq() -> None:
    # The hash split is not exactly n / shards: no shard may fall back under the switch.
    ix = Settings().index
    shard_of = assign_shards(np.arange(1_000_000) // 10, None, ix.shards, "document")
    sizes = np.bincount(shard_of, minlength=ix.shards)
    kinds = {choose_kind(int(n), flat_max=ix.flat_max_vectors, ivfpq_min=ix.ivfpq_min_vectors) for n in sizes}
    assert kinds == {"ivfpq"}, sizes
    assert choose_kind(200_000, flat_max=ix.flat_max_vectors, ivfpq_min=ix.ivfpq_min_vectors) == "hnsw"
