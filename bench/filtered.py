"""Filtered dense search: recall@10 vs exact filtered search and latency per strategy.

Run: ``python -m bench.filtered --n 100000``. One HNSW shard, calibrated as a server does at
load (``index.search_costs``); for each selectivity a random allowed mask; every strategy is
timed on the same queries, then the planner's choice (``*``, with the plan and its predicted
cost) and the previous planner (fixed thresholds, exact by gathering the allowed rows) are
timed in alternating rounds against the unfiltered search, so "x unfilt" is a same-run
ratio on a shared machine. PASS/FAIL: recall@10 >= 0.95 and within 2x of unfiltered.
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
from index.search_costs import costs_of
from retrieve.planner import EF_SEARCH_CAP, OVERFETCH_SAFETY, SearchPlan, plan_search, search_shard
from wiring import dense_params

# The rows (100% .. 0.01%) plus 95% and 50%, where over-fetch and filtered traversal take over.
SELECTIVITIES = (1.0, 0.95, 0.5, 0.1, 0.01, 0.001, 0.0001)
TARGET = 0.95
MAX_RATIO = 2.0
ROUNDS = 5
# The previous planner's fixed thresholds (the serving defaults before costs were measured).
OLD_EXACT_MAX_ALLOWED, OLD_EXACT_MAX_FRACTION, OLD_OVERFETCH_MIN_FRACTION = 20_000, 0.02, 0.9
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
    started = time.perf_counter()
    costs = costs_of(shard)
    print(
        f"calibrated in {(time.perf_counter() - started) * 1000:.0f} ms: {costs}; base ef={args.ef_search}\n"
    )
    rng = np.random.default_rng(args.seed + 7)
    rows: list[list[object]] = []
    for frac in SELECTIVITIES:
        n_allowed = max(1, round(frac * args.n))
        allowed = np.zeros(args.n, dtype=bool)
        allowed[rng.choice(args.n, size=n_allowed, replace=False)] = True
        rows.extend(_rows_for(shard, base, queries, allowed, frac, args))
    print_table(["allowed", "n_allowed", "strategy", "recall@10", "ms/query", "x unfilt", "target"], rows)


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
        costs=costs_of(shard),
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
        rows.append([label, n_allowed, name, recall, time_per_query(run, subset), "", ""])

    def unfiltered(qs: np.ndarray) -> np.ndarray:
        return shard.search(qs, args.k, allowed=None, strategy="unfiltered", ef_search=args.ef_search)[1]

    def planned(qs: np.ndarray) -> np.ndarray:
        return search_shard(shard, qs, args.k, mask, plan)[1]

    old = _old_plan(n_allowed, args)

    def previous(qs: np.ndarray) -> np.ndarray:
        if old.strategy == "exact":
            return _gathered_exact(base, qs, args.k, allowed)
        return search_shard(shard, qs, args.k, mask, old)[1]

    (base_ms, new_ms, old_ms) = _alternating([unfiltered, planned, previous], queries)
    for name, fn, ms, verdict in (
        (f"* planner: {plan.describe()}", planned, new_ms, True),
        (f"  old planner: {old.strategy} ef={old.ef_search} fetch_k={old.fetch_k}", previous, old_ms, False),
    ):
        recall = recall_at_k(fn(queries), truth)
        ratio = ms / base_ms
        target = ("PASS" if recall >= TARGET and ratio <= MAX_RATIO else "FAIL") if verdict else ""
        rows.append([label, n_allowed, name, recall, ms, f"{ratio:.2f}", target])
    return rows


def _alternating(fns: list, queries: np.ndarray) -> list[float]:
    """Mean ms/query of each function, timed in ROUNDS alternating rounds (shared machine)."""
    totals = [0.0] * len(fns)
    for fn in fns:
        fn(queries[:1])
    for _ in range(ROUNDS):
        for i, fn in enumerate(fns):
            started = time.perf_counter()
            for j in range(len(queries)):
                fn(queries[j : j + 1])
            totals[i] += time.perf_counter() - started
    return [t * 1000 / (ROUNDS * len(queries)) for t in totals]


def _old_plan(n_allowed: int, args: argparse.Namespace) -> SearchPlan:
    """The previous planner: fixed selectivity thresholds (kept here only as the baseline)."""
    frac = n_allowed / args.n
    if n_allowed == args.n:
        return SearchPlan("unfiltered", args.ef_search, 16, args.k, n_allowed, args.n)
    if n_allowed <= OLD_EXACT_MAX_ALLOWED or frac <= OLD_EXACT_MAX_FRACTION:
        return SearchPlan("exact", None, None, None, n_allowed, args.n)
    raised = min(EF_SEARCH_CAP, max(args.ef_search, math.ceil(args.ef_search / frac)))
    if frac >= OLD_OVERFETCH_MIN_FRACTION:
        fetch = min(args.n, math.ceil(args.k / frac * OVERFETCH_SAFETY))
        return SearchPlan(
            "overfetch", min(EF_SEARCH_CAP, max(raised, 2 * fetch)), 16, fetch, n_allowed, args.n
        )
    return SearchPlan("filtered", raised, 16, None, n_allowed, args.n)


def _gathered_exact(base: np.ndarray, qs: np.ndarray, k: int, allowed: np.ndarray) -> np.ndarray:
    """The previous exact path: copy the allowed rows, then one matmul (the baseline)."""
    positions = np.flatnonzero(allowed)
    scores = qs @ base[positions].T
    kk = min(k, len(positions))
    top = np.argsort(-scores, axis=1)[:, :kk]
    out = np.full((len(qs), k), -1, dtype=np.int64)
    out[:, :kk] = positions[top]
    return out


if __name__ == "__main__":
    main()
