"""Index quality: recall@k of each shard's ANN index against exact search.

The same check serves the operator console's "check quality" button and a migration gate:
sample vectors stored in the shard itself as queries, search them with the shard's FAISS
index (unfiltered, at the serving efSearch / nprobe) and exactly over the shard's raw
vectors, and report the mean overlap of the two top-k sets (recall@k). Flat shards are exact
by construction and score 1.0.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from index.faiss_shards import DenseShard, exact_search
from index.manifest import read_manifest


@dataclass(frozen=True, slots=True)
class ShardQuality:
    shard: int
    kind: str
    vectors: int
    sampled: int
    k: int
    recall: float | None  # None for an empty shard


def shard_recall(
    shard: DenseShard, *, sample: int, k: int, ef_search: int, nprobe: int, seed: int = 0
) -> tuple[float | None, int]:
    """Recall@k of ``shard``'s ANN search against exact search, and how many queries it took.

    Args:
        shard: a built or loaded dense shard.
        sample: at most this many of the shard's own vectors are used as queries.
        k: the cut-off (capped at the shard size).
        ef_search: HNSW efSearch of the ANN search.
        nprobe: IVF nprobe of the ANN search.
        seed: the sampling seed, so a check can be repeated.
    """
    n = shard.ntotal
    if n == 0 or sample < 1:
        return None, 0
    rng = np.random.default_rng(seed)
    picks = np.sort(rng.choice(n, size=min(sample, n), replace=False))
    queries = np.ascontiguousarray(np.asarray(shard.vectors[picks], dtype=np.float32))
    kk = min(k, n)
    _, exact = exact_search(shard.vectors, queries, kk)
    _, ann = shard.search(
        queries, kk, allowed=None, strategy="unfiltered", ef_search=ef_search, nprobe=nprobe
    )
    hits = sum(
        len(set(a[a >= 0].tolist()) & set(e[e >= 0].tolist())) for a, e in zip(ann, exact, strict=True)
    )
    return hits / (len(picks) * kk), len(picks)


def version_quality(
    path: Path, *, sample: int, k: int, ef_search: int, nprobe: int, seed: int = 0
) -> list[ShardQuality]:
    """``shard_recall`` for every shard of the index version at ``path``."""
    manifest = read_manifest(path)
    out = []
    for number, entry in enumerate(manifest.shards):
        shard = DenseShard.load(path / entry.path)
        recall, sampled = shard_recall(
            shard, sample=sample, k=k, ef_search=ef_search, nprobe=nprobe, seed=seed
        )
        out.append(ShardQuality(number, shard.kind, shard.ntotal, sampled, min(k, shard.ntotal), recall))
    return out
