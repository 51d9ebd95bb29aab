"""What the operator console adds, measured.

Run: ``python -m bench.console --vectors 20000 --sample 200``.

1. Per-request cost on ``/v1/retrieve`` of the per-stage ranks every result now carries
   (``retrieve.service._stage_ranks``), against the same request step without them (the
   baseline, measured in the same run), for 8 and 50 ranked hits.
2. "Check quality" (``index.quality.shard_recall``): wall time and recall@10 of one HNSW
   shard of ``--vectors`` synthetic clustered 384-d vectors at the serving efSearch, against
   a flat shard of the same vectors (recall 1.0 by construction, the baseline).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from types import MappingProxyType

import numpy as np

from bench.common import clustered_vectors, print_table
from catalog.serving import ChunkDetail
from core.settings import Settings
from index.faiss_shards import DenseShard
from index.quality import shard_recall
from retrieve.fusion import FusedHit
from retrieve.service import ResultItem, _stage_ranks
from wiring import dense_params


def _ranked(n: int) -> list[tuple[FusedHit, ChunkDetail]]:
    out = []
    for i in range(n):
        hit = FusedHit(
            i,
            1.0 / (60 + i),
            MappingProxyType({"dense": 0.9, "lexical": 3.0}),
            MappingProxyType({"dense": i + 1}),
        )
        detail = ChunkDetail(i, f"c{i}", i, f"d{i}", None, "text", 0, 4, None, None, (), {}, None, None, None)
        out.append((hit, detail))
    return out


def _per_call_us(fn: Callable[[], object], repeat: int) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) * 1e6 / repeat


def _baseline(ranked: list[tuple[FusedHit, ChunkDetail]]) -> list[ResultItem]:
    """The result list as it was built before the console (no ranks)."""
    return [ResultItem(d, f.score, dict(f.stage_scores)) for f, d in ranked]


def _with_ranks(ranked: list[tuple[FusedHit, ChunkDetail]]) -> list[ResultItem]:
    """As ``SearchService.retrieve`` builds it now, without a reranker."""
    ranks = _stage_ranks(ranked, len(ranked), None)
    return [ResultItem(d, f.score, dict(f.stage_scores), r) for (f, d), r in zip(ranked, ranks, strict=False)]


def stage_rank_cost(repeat: int, rounds: int = 7) -> None:
    """Baseline and new code alternate, ``rounds`` times each; the best round of each counts
    (the least disturbed by other processes on a shared machine)."""
    rows = []
    for n in (8, 50):
        ranked = _ranked(n)
        base, new = [], []
        for _ in range(rounds):
            base.append(_per_call_us(partial(_baseline, ranked), repeat))
            new.append(_per_call_us(partial(_with_ranks, ranked), repeat))
        rows.append((n, min(base), min(new), min(new) - min(base)))
    print(f"per-request result building (µs per request, best of {rounds} alternating rounds)")
    print_table(["hits", "baseline µs", "with ranks µs", "added µs"], rows)


def quality_check(n: int, sample: int) -> None:
    settings = Settings()
    vectors, _, how = clustered_vectors(n, 1, 384)
    rows_ids = np.arange(n, dtype=np.int64)
    base = dense_params(settings)
    rows = []
    for kind in ("flat", "hnsw"):
        t = time.perf_counter()
        shard = DenseShard.build(vectors, rows_ids, replace(base, kind=kind))
        built = time.perf_counter() - t
        t = time.perf_counter()
        recall, sampled = shard_recall(
            shard,
            sample=sample,
            k=10,
            ef_search=settings.index.hnsw_ef_search,
            nprobe=settings.index.ivf_nprobe,
        )
        rows.append((kind, n, sampled, recall, (time.perf_counter() - t) * 1000, built))
    print(f"\ncheck quality on one shard ({how.split(';')[0]})")
    print_table(["kind", "vectors", "sampled", "recall@10", "check ms", "build s"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=20_000)
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5_000)
    args = parser.parse_args()
    stage_rank_cost(args.repeat)
    quality_check(args.vectors, args.sample)


if __name__ == "__main__":
    main()
