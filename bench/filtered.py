"""Filtered dense search: recall@10 vs exact filtered search and latency per strategy.

Run: ``python -m bench.filtered --n 100000``. One HNSW shard; for each selectivity a random
allowed mask; every strategy is timed on the same queries and the planner's choice is
marked with ``*``. PASS/FAIL is the recall@10 >= 0.95 target for the planner's row.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import replace

import faiss
import numpy as np

from bench.common import clustered_vectors, print_table, recall_at_k, time_per_query
from core.settings import Settings
from index.faiss_shards import DenseShard, exact_search
from retrieve.planner import EF_SEARCH_CAP, OVERFETCH_SAFETY, plan_search, search_shard
from wiring import dense_params

# The rows (100% .. 0.01%) plus 95% and 50%, where over-fetch and filtered traversal take over.
SELECTIVITIES = (1.0, 0.95, 0.5, 0.1, 0.01, 0.001, 0.0001)
TARGET = 0.95
# Overfetch beyond this many candidates walks most of the graph; cap it so the row finishes.
OVERFETCH_CAP = 20_000


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--m", type=int, default=32)
    parser.add_argument("--ef-construction", type=int, default=80)
    # Defaults: the serving settings (core.settings), so the table shows what a server does.
    serving = Settings()
    parser.add_argument("--ef-search", type=int, default=serving.index.hnsw_ef_search)
    parser.add_argument("--exact-max-allowed", type=int, default=serving.retrieve.exact_max_allowed)
    parser.add_argument("--exact-max-fraction", type=float, default=serving.retrieve.exact_max_fraction)
    parser.add_argument(
        "--overfetch-min-fraction", type=float, default=serving.retrieve.overfetch_min_fraction
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def _strategies(frac: float, args: argparse.Namespace) -> list[tuple[str, dict[str, int | None]]]:
    raised = min(EF_SEARCH_CAP, math.ceil(args.ef_search / frac))
    fetch = min(args.n, OVERFETCH_CAP, math.ceil(args.k / frac * OVERFETCH_SAFETY))
    return [
        ("exact", {}),
        (f"filtered ef={args.ef_search}", {"ef_search": args.ef_search}),
        (f"filtered ef={raised}", {"ef_search": raised}),
        (f"overfetch fetch_k={fetch}", {"fetch_k": fetch, "ef_search": max(args.ef_search, 2 * fetch)}),
    ]


def main() -> None:
    args = _args()
    faiss.omp_set_num_threads(args.threads)
    base, queries, how = clustered_vectors(args.n, args.queries, args.dim, seed=args.seed)
    print(f"data: {args.n:,} x {args.dim}, {args.queries} queries, k={args.k}, cores={os.cpu_count()}")
    print(f"      {how}")
    params = replace(
        dense_params(Settings()),
        kind="hnsw",
        hnsw_m=args.m,
        ef_construction=args.ef_construction,
        ef_search=args.ef_search,
    )
    started = time.perf_counter()
    shard = DenseShard.build(base, np.arange(args.n, dtype=np.int64), params)
    build_s = time.perf_counter() - started
    print(f"HNSW M={args.m} efConstruction={args.ef_construction} built in {build_s:.1f} s")
    print(
        f"planner: exact_max_allowed={args.exact_max_allowed} exact_max_fraction={args.exact_max_fraction} "
        f"overfetch_min_fraction={args.overfetch_min_fraction} base ef={args.ef_search}\n"
    )
    rng = np.random.default_rng(args.seed + 7)
    rows: list[list[object]] = []
    for frac in SELECTIVITIES:
        n_allowed = max(1, round(frac * args.n))
        allowed = np.zeros(args.n, dtype=bool)
        allowed[rng.choice(args.n, size=n_allowed, replace=False)] = True
        rows.extend(_rows_for(shard, base, queries, allowed, frac, args))
    print_table(["allowed", "n_allowed", "strategy", "recall@10", "ms/query", "target"], rows)


def _rows_for(
    shard: DenseShard,
    base: np.ndarray,
    queries: np.ndarray,
    allowed: np.ndarray,
    frac: float,
    args: argparse.Namespace,
) -> list[list[object]]:
    n_allowed = int(allowed.sum())
    _, truth = exact_search(base, queries, args.k, allowed)
    plan = plan_search(
        n_allowed=n_allowed,
        n_total=args.n,
        k=args.k,
        kind=shard.kind,
        exact_max_allowed=args.exact_max_allowed,
        exact_max_fraction=args.exact_max_fraction,
        overfetch_min_fraction=args.overfetch_min_fraction,
        base_ef_search=args.ef_search,
        base_nprobe=16,
    )
    label = f"{frac * 100:g}%"
    rows: list[list[object]] = []
    mask = None if n_allowed == args.n else allowed
    for name, extra in _strategies(frac, args):
        strategy = name.split()[0]

        def run(qs: np.ndarray, strategy: str = strategy, extra: dict = extra) -> np.ndarray:
            return shard.search(qs, args.k, allowed=mask, strategy=strategy, **extra)[1]  # type: ignore[arg-type]

        subset = queries if strategy != "overfetch" or frac >= 0.01 else queries[:50]
        recall = recall_at_k(run(subset), truth[: len(subset)])
        rows.append([label, n_allowed, name, recall, time_per_query(run, subset), ""])

    def planned(qs: np.ndarray) -> np.ndarray:
        return search_shard(shard, qs, args.k, mask, plan)[1]

    recall = recall_at_k(planned(queries), truth)
    choice = f"* planner: {plan.strategy} ef={plan.ef_search} fetch_k={plan.fetch_k}"
    verdict = "PASS" if recall >= TARGET else "FAIL"
    rows.append([label, n_allowed, choice, recall, time_per_query(planned, queries), verdict])
    return rows


if __name__ == "__main__":
    main()
