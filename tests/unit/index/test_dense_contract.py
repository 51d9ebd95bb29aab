"""One contract suite for every dense shard kind: flat, HNSW and IVF-PQ."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import IndexIntegrityError, InvalidInputError
from index.faiss_shards import DenseShard, choose_kind, exact_search, nearest_divisor
from tests.factories import dense
from tests.unit.index.conftest import DIM, KIND_PARAMS, MIN_RECALL, N, clustered, recall

STRATEGIES = ("exact", "filtered", "overfetch", "unfiltered")
ROW_OFFSET = 1_000_000


@pytest.fixture(scope="module", params=sorted(KIND_PARAMS))
def shard(request: pytest.FixtureRequest, corpus: np.ndarray) -> DenseShard:
    built = DenseShard.build(corpus, np.arange(N, dtype=np.int64) + ROW_OFFSET, KIND_PARAMS[request.param])
    assert built.kind == request.param, built.fallback_reason
    return built


def test_build_reports_shape(shard: DenseShard) -> None:
    assert (shard.ntotal, shard.dim) == (N, DIM)
    assert shard.nbytes_index > 0
    assert shard.fallback_reason is None


def test_unfiltered_recall_against_exact(shard: DenseShard, corpus: np.ndarray, queries: np.ndarray) -> None:
    _, truth = exact_search(corpus, queries, 10)
    scores, found = shard.search(queries, 10, allowed=None, strategy="unfiltered")
    assert recall(found, truth) >= MIN_RECALL[shard.kind]
    assert np.all(np.diff(scores, axis=1) <= 1e-6), "scores must be sorted best first"


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("fraction", [0.5, 0.05, 0.002])
def test_filtered_only_returns_allowed(
    shard: DenseShard, corpus: np.ndarray, queries: np.ndarray, strategy: str, fraction: float
) -> None:
    allowed = np.random.default_rng(3).random(N) < fraction
    scores, found = shard.search(queries, 10, allowed=allowed, strategy=strategy, fetch_k=400, ef_search=400)  # type: ignore[arg-type]
    assert found.shape == scores.shape == (len(queries), 10)
    hits = found[found >= 0]
    assert allowed[hits].all()
    assert np.all(np.isneginf(scores[found < 0]))


@pytest.mark.parametrize("fraction", [0.5, 0.1])
def test_filtered_recall_against_exact_filtered(
    shard: DenseShard, corpus: np.ndarray, queries: np.ndarray, fraction: float
) -> None:
    allowed = np.random.default_rng(4).random(N) < fraction
    _, truth = exact_search(corpus, queries, 10, allowed)
    _, found = shard.search(queries, 10, allowed=allowed, strategy="filtered", ef_search=640, nprobe=16)
    assert recall(found, truth) >= MIN_RECALL[shard.kind]
    _, exact = shard.search(queries, 10, allowed=allowed, strategy="exact")
    assert recall(exact, truth) == 1.0


def test_save_load_round_trip(shard: DenseShard, queries: np.ndarray, tmp_path: Path) -> None:
    shard.save(tmp_path)
    allowed = np.random.default_rng(5).random(N) < 0.3
    for mmap in (True, False):
        loaded = DenseShard.load(tmp_path, mmap=mmap)
        assert (loaded.kind, loaded.ntotal, loaded.dim) == (shard.kind, shard.ntotal, shard.dim)
        assert loaded.params == shard.params
        for strategy in STRATEGIES:
            want = shard.search(queries, 10, allowed=allowed, strategy=strategy)  # type: ignore[arg-type]
            got = loaded.search(queries, 10, allowed=allowed, strategy=strategy)  # type: ignore[arg-type]
            np.testing.assert_array_equal(got[1], want[1])
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    assert isinstance(DenseShard.load(tmp_path, mmap=True).vectors, np.memmap)


def test_row_ids_map_positions(shard: DenseShard, corpus: np.ndarray) -> None:
    _, found = shard.search(corpus[:5], 1, allowed=None, strategy="exact")
    np.testing.assert_array_equal(shard.row_ids[found[:, 0]], np.arange(5) + ROW_OFFSET)


@pytest.mark.parametrize("kind", sorted(KIND_PARAMS))
def test_empty_shard_builds_and_finds_nothing(kind: str, queries: np.ndarray, tmp_path: Path) -> None:
    empty = DenseShard.build(np.zeros((0, DIM), np.float32), np.zeros(0, np.int64), KIND_PARAMS[kind])
    assert empty.ntotal == 0
    for strategy in STRATEGIES:
        scores, found = empty.search(queries, 5, allowed=None, strategy=strategy)  # type: ignore[arg-type]
        assert (found == -1).all() and np.isneginf(scores).all()
    empty.save(tmp_path)
    assert DenseShard.load(tmp_path).ntotal == 0


@pytest.mark.parametrize("kind", sorted(KIND_PARAMS))
def test_single_vector_shard(kind: str, queries: np.ndarray) -> None:
    one = DenseShard.build(clustered(1, DIM, seed=7), np.array([42], np.int64), KIND_PARAMS[kind])
    for strategy in STRATEGIES:
        scores, found = one.search(queries[:3], 4, allowed=None, strategy=strategy)  # type: ignore[arg-type]
        np.testing.assert_array_equal(found[:, 0], 0)
        assert (found[:, 1:] == -1).all() and np.isfinite(scores[:, 0]).all()
    _, none = one.search(queries[:3], 4, allowed=np.array([False]), strategy="filtered")
    assert (none == -1).all()


def test_ivfpq_falls_back_when_too_small_to_train(corpus: np.ndarray) -> None:
    small = DenseShard.build(corpus[:500], np.arange(500), KIND_PARAMS["ivfpq"])
    assert small.kind == "flat" and small.requested_kind == "ivfpq"
    assert small.fallback_reason is not None and "500" in small.fallback_reason


def test_ivfpq_pq_m_snaps_to_a_divisor(corpus: np.ndarray) -> None:
    params = dense(kind="ivfpq", nlist=16, pq_m=7, pq_nbits=6)
    assert DenseShard.build(corpus, np.arange(N), params).params.pq_m == nearest_divisor(DIM, 7) == 8


def test_bad_inputs_raise(shard: DenseShard, queries: np.ndarray) -> None:
    with pytest.raises(InvalidInputError):
        shard.search(queries[:, :5], 3, allowed=None, strategy="exact")
    with pytest.raises(InvalidInputError):
        shard.search(queries, 3, allowed=np.ones(7, bool), strategy="exact")
    with pytest.raises(InvalidInputError):
        shard.search(queries, 3, allowed=None, strategy="bogus")  # type: ignore[arg-type]


def test_load_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(IndexIntegrityError):
        DenseShard.load(tmp_path)


def test_choose_kind_policy() -> None:
    assert choose_kind(10, flat_max=20_000, ivfpq_min=2_000_000) == "flat"
    assert choose_kind(20_001, flat_max=20_000, ivfpq_min=2_000_000) == "hnsw"
    assert choose_kind(2_000_000, flat_max=20_000, ivfpq_min=2_000_000) == "ivfpq"


def test_exact_search_pads_and_masks() -> None:
    vectors = np.eye(4, dtype=np.float32)
    scores, found = exact_search(vectors, vectors[:1], 3, np.array([False, True, True, False]))
    assert set(found[0, :2]) == {1, 2} and found[0, 2] == -1 and np.isneginf(scores[0, 2])
