"""Dense index kinds compared on one synthetic corpus: build, recall@10, QPS, size, load.

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.index --n 200000``. Recall is against exact
search on the same data; QPS is single-query, single-thread; ratios are vs the flat
baseline measured in the same run. Load times compare a normal read with the mmap read.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import faiss
import numpy as np

from bench.common import clustered_vectors, print_table, recall_at_k, time_per_query
from core.settings import Settings
from index.capacity import estimate_capacity
from index.faiss_shards import VECTORS_FILE, DenseShard, exact_search
from wiring import dense_params


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--m", type=int, default=32, help="HNSW M")
    parser.add_argument("--ef-construction", type=int, default=80)
    parser.add_argument("--pq-m", type=int, default=48)
    parser.add_argument("--pq-nbits", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="FAISS OpenMP threads")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def _sweep(kind: str) -> list[dict[str, int]]:
    if kind == "hnsw":
        return [{"ef_search": ef} for ef in (16, 32, 64, 128, 256)]
    if kind == "ivfpq":
        return [{"nprobe": p} for p in (4, 8, 16, 32, 64)]
    return [{}]


def main() -> None:
    args = _args()
    faiss.omp_set_num_threads(args.threads)
    base, queries, how = clustered_vectors(args.n, args.queries, args.dim, seed=args.seed)
    print(f"data: {args.n:,} x {args.dim}, {args.queries} queries, k={args.k}, faiss threads={args.threads}")
    print(f"      {how}")
    print(f"      OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}\n")
    _, truth = exact_search(base, queries, args.k)
    serving = dense_params(Settings())  # the serving defaults; the flags override some
    kinds = {
        "flat": replace(serving, kind="flat"),
        "hnsw": replace(serving, kind="hnsw", hnsw_m=args.m, ef_construction=args.ef_construction),
        "ivfpq": replace(serving, kind="ivfpq", pq_m=args.pq_m, pq_nbits=args.pq_nbits, refine=True),
    }
    search_rows: list[list[object]] = []
    size_rows: list[list[object]] = []
    flat_qps = flat_build = flat_bytes = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, params in kinds.items():
            started = time.perf_counter()
            shard = DenseShard.build(base, np.arange(args.n, dtype=np.int64), params)
            build_s = time.perf_counter() - started
            folder = Path(tmp) / name
            shard.save(folder)
            normal_s, mmap_s = _load_times(folder)
            if name == "flat":
                flat_build, flat_bytes = build_s, float(shard.nbytes_index)
            described = _describe(shard)
            for extra in _sweep(name):

                def run(
                    qs: np.ndarray, extra: dict[str, int] = extra, shard: DenseShard = shard
                ) -> np.ndarray:
                    return shard.search(qs, args.k, allowed=None, strategy="unfiltered", **extra)[1]

                recall = recall_at_k(run(queries), truth)
                qps = 1000.0 / time_per_query(run, queries)
                flat_qps = flat_qps or qps
                setting = ", ".join(f"{k}={v}" for k, v in extra.items()) or "-"
                search_rows.append([described, setting, recall, qps, qps / flat_qps])
            estimate = estimate_capacity(
                args.n, args.dim, kind=shard.kind, hnsw_m=args.m, pq_m=shard.params.pq_m
            )
            size_rows.append(
                [
                    described,
                    build_s,
                    build_s / flat_build if flat_build else 1.0,
                    shard.nbytes_index / 2**20,
                    shard.nbytes_index / flat_bytes,
                    estimate.index_bytes / 2**20,
                    (folder / VECTORS_FILE).stat().st_size / 2**20,
                    normal_s * 1000,
                    mmap_s * 1000,
                ]
            )
    headers = ["index", "build s", "x flat", "index MiB", "x flat", "est. MiB", "vectors.npy MiB"]
    print_table([*headers, "load ms", "mmap load ms"], size_rows)
    print()
    print_table(["index", "setting", "recall@10", "QPS", "x flat QPS"], search_rows)


def _describe(shard: DenseShard) -> str:
    p = shard.params
    if shard.kind == "hnsw":
        return f"hnsw M={p.hnsw_m} efC={p.ef_construction}"
    if shard.kind == "ivfpq":
        return f"ivfpq nlist={p.nlist} PQ{p.pq_m}x{p.pq_nbits} refine x{p.refine_factor}"
    return "flat"


def _load_times(folder: Path) -> tuple[float, float]:
    started = time.perf_counter()
    DenseShard.load(folder, mmap=False)
    normal = time.perf_counter() - started
    started = time.perf_counter()
    DenseShard.load(folder, mmap=True)
    return normal, time.perf_counter() - started


if __name__ == "__main__":
    main()
