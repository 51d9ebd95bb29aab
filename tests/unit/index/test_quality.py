"""``index.quality.shard_recall``: exact shards score 1.0, a starved HNSW search scores lower."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from bench.common import clustered_vectors
from index.faiss_shards import DenseShard
from index.quality import shard_recall
from tests import factories


def test_recall_tells_a_starved_graph_search_from_an_exact_one() -> None:
    vectors, _, _ = clustered_vectors(3000, 1, 32, clusters=30, rank=8)
    rows = np.arange(len(vectors), dtype=np.int64)
    flat = DenseShard.build(vectors, rows, factories.dense(kind="flat"))
    hnsw = DenseShard.build(
        vectors, rows, replace(factories.dense(kind="hnsw"), hnsw_m=4, ef_construction=16)
    )
    exact, sampled = shard_recall(flat, sample=100, k=10, ef_search=16, nprobe=1)
    assert exact == 1.0 and sampled == 100
    starved, _ = shard_recall(hnsw, sample=100, k=10, ef_search=10, nprobe=1)
    generous, _ = shard_recall(hnsw, sample=100, k=10, ef_search=400, nprobe=1)
    assert starved is not None and generous is not None
    assert starved < generous <= 1.0 and generous > 0.9
    # repeatable with the same seed, and an empty shard has no recall
    assert shard_recall(hnsw, sample=100, k=10, ef_search=10, nprobe=1)[0] == starved
    empty = DenseShard.build(
        np.zeros((0, 32), np.float32), np.zeros(0, np.int64), factories.dense(kind="flat")
    )
    assert shard_recall(empty, sample=10, k=10, ef_search=10, nprobe=1) == (None, 0)
