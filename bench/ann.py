"""HNSW vs IVF-PQ (+ exact refine) at the sizes where the auto policy chooses between them.

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.ann --sizes 200000 1000000 --cache /tmp/ann``.
Per size: clustered synthetic 384-d unit vectors (``bench.common.clustered_vectors``), exact
top-10 as the truth, then per index kind and search setting: recall@10, p50/p95 latency of
single-query searches (one FAISS thread), bytes per vector resident in RAM (the FAISS
index) and on disk (index + ``vectors.npy`` + ``row_ids.npy``), and build time. Shards are
saved and searched memory-mapped, as a serving node loads them; IVF-PQ's refine reads the
``k * refine_factor`` candidate rows of ``vectors.npy`` through the page cache, so its RAM
column counts the codes only and the "refine pages" column the vectors it touches.
``--cache`` keeps built shards between runs (the 1M HNSW build takes most of an hour on a
contended core). A filtered row per kind runs the planner (``retrieve.planner``) on a random
``--allowed`` fraction and counts returned positions outside the mask ("leaks", must be 0).
Ratios divide by HNSW at the serving efSearch, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import faiss
import numpy as np

from bench.common import clustered_vectors, print_table, recall_at_k
from core.settings import Settings
from index.faiss_shards import INDEX_FILE, ROW_IDS_FILE, VECTORS_FILE, DenseKind, DenseShard, exact_search
from index.search_costs import costs_of
from retrieve.planner import plan_search, search_shard
from wiring import dense_params

BUILD_FILE = "bench-build.json"


def _args() -> argparse.Namespace:
    serving = Settings().index
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--kinds", nargs="+", default=["hnsw", "ivfpq"], choices=["hnsw", "ivfpq"])
    parser.add_argument("--ef-search", type=int, nargs="+", default=[64, serving.hnsw_ef_search, 256])
    parser.add_argument("--nprobe", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--refine", type=int, nargs="+", default=[1, 4, serving.ivf_refine_factor])
    parser.add_argument("--nlist", type=int, default=serving.ivf_nlist, help="0 = auto (4*sqrt(n))")
    parser.add_argument("--pq-m", type=int, default=serving.pq_m)
    parser.add_argument("--allowed", type=float, default=0.1, help="allowed fraction of the filtered row")
    parser.add_argument("--cache", type=Path, default=None, help="folder keeping built shards")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def _shard(
    kind: DenseKind, base: np.ndarray, args: argparse.Namespace, folder: Path
) -> tuple[DenseShard, float]:
    """Load the shard from ``folder`` when a previous run saved it, else build and save it."""
    if (folder / BUILD_FILE).exists():
        built = json.loads((folder / BUILD_FILE).read_text(encoding="utf-8"))
        return _with_search_defaults(DenseShard.load(folder)), float(built["build_s"])
    params = replace(dense_params(Settings()), kind=kind, nlist=args.nlist, pq_m=args.pq_m)
    started = time.perf_counter()
    shard = DenseShard.build(base, np.arange(len(base), dtype=np.int64), params)
    build_s = time.perf_counter() - started
    shard.save(folder)
    (folder / BUILD_FILE).write_text(
        json.dumps({"build_s": build_s, "threads": args.threads}), encoding="utf-8"
    )
    return _with_search_defaults(DenseShard.load(folder)), build_s


def _with_search_defaults(shard: DenseShard) -> DenseShard:
    """A cached shard searched with today's search-time settings (nlist, PQ, graph are kept)."""
    ix = Settings().index
    shard.params = replace(
        shard.params, ef_search=ix.hnsw_ef_search, nprobe=ix.ivf_nprobe, refine_factor=ix.ivf_refine_factor
    )
    return shard


def _latencies(
    search: Callable[[np.ndarray], np.ndarray], queries: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Positions found and per-query milliseconds, one query per call.

    One untimed pass over all queries first: the shards are memory-mapped, and the first
    touch of a page is a page fault, not the search.
    """
    for i in range(len(queries)):
        search(queries[i : i + 1])
    found, millis = [], []
    for i in range(len(queries)):
        started = time.perf_counter()
        found.append(search(queries[i : i + 1]))
        millis.append((time.perf_counter() - started) * 1000)
    return np.vstack(found), np.asarray(millis)


def _settings_for(kind: DenseKind, args: argparse.Namespace) -> list[dict[str, int]]:
    if kind == "hnsw":  # the serving efSearch first: it is the baseline of the ratio column
        serving = Settings().index.hnsw_ef_search
        return [{"ef_search": ef} for ef in sorted(args.ef_search, key=lambda ef: ef != serving)]
    return [{"nprobe": p, "refine_factor": r} for r in args.refine for p in args.nprobe]


def _describe(shard: DenseShard) -> str:
    p = shard.params
    if shard.kind == "hnsw":
        return f"hnsw M={p.hnsw_m} efC={p.ef_construction}"
    return f"ivfpq nlist={p.nlist} PQ{p.pq_m}x{p.pq_nbits}"


def _filtered_row(
    shard: DenseShard, queries: np.ndarray, args: argparse.Namespace, rng: np.random.Generator
) -> list[object]:
    """The planner on a random allowed mask: recall vs exact filtered search, latency, leaks."""
    allowed = rng.random(shard.ntotal) < args.allowed
    plan = plan_search(
        n_allowed=int(allowed.sum()),
        n_total=shard.ntotal,
        k=args.k,
        kind=shard.kind,
        costs=costs_of(shard),
        # As a server plans (wiring.search): the base efSearch and nprobe come from the settings.
        base_ef_search=Settings().index.hnsw_ef_search,
        base_nprobe=Settings().index.ivf_nprobe,
    )
    _, truth = exact_search(shard.vectors, queries, args.k, allowed)
    found, ms = _latencies(lambda q: search_shard(shard, q, args.k, allowed, plan)[1], queries)
    leaks = int((~allowed[found[found >= 0]]).sum())
    setting = f"{args.allowed:.0%} allowed: {plan.strategy} ef={plan.ef_search} nprobe={plan.nprobe}"
    return [setting, recall_at_k(found, truth), *np.percentile(ms, [50, 95]), leaks]


def measure(n: int, args: argparse.Namespace) -> tuple[list[list[object]], list[list[object]]]:
    base, queries, _ = clustered_vectors(n, args.queries, args.dim, seed=args.seed)
    _, truth = exact_search(base, queries, args.k)
    rng = np.random.default_rng(args.seed + 7)
    search_rows: list[list[object]] = []
    size_rows: list[list[object]] = []
    reference_ms = reference_bytes = 0.0
    root = args.cache or Path(os.environ.get("TMPDIR", "/tmp")) / f"ragline-ann-{os.getpid()}"
    for kind in args.kinds:
        shard, build_s = _shard(kind, base, args, root / f"{kind}-{n}-{args.dim}-s{args.seed}")
        folder = root / f"{kind}-{n}-{args.dim}-s{args.seed}"
        index_b = (folder / INDEX_FILE).stat().st_size
        disk_b = sum((folder / f).stat().st_size for f in (INDEX_FILE, VECTORS_FILE, ROW_IDS_FILE))
        described = _describe(shard)
        for extra in _settings_for(kind, args):

            def run(q: np.ndarray, extra: dict[str, int] = extra, shard: DenseShard = shard) -> np.ndarray:
                return shard.search(q, args.k, allowed=None, strategy="unfiltered", **extra)[1]

            found, ms = _latencies(run, queries)
            p50, p95 = np.percentile(ms, [50, 95])
            if kind == "hnsw" and extra.get("ef_search") == shard.params.ef_search:
                reference_ms = float(p50)
            candidates = args.k * extra.get("refine_factor", 0)
            setting = ", ".join(f"{key}={value}" for key, value in extra.items())
            ratio = p50 / reference_ms if reference_ms else float("nan")
            search_rows.append(
                [f"{n:,}", described, setting, recall_at_k(found, truth), p50, p95, ratio, candidates]
            )
        filtered = _filtered_row(shard, queries, args, rng)
        search_rows.append([f"{n:,}", described, *filtered[:4], float("nan"), f"leaks={filtered[4]}"])
        if kind == "hnsw":
            reference_bytes = index_b / n
        refine_pages = args.dim * 4 if kind == "ivfpq" else 0
        size_rows.append(
            [
                f"{n:,}",
                described,
                build_s,
                index_b / n,
                index_b / n / reference_bytes if reference_bytes else float("nan"),
                refine_pages,
                disk_b / n,
                index_b / 2**20,
            ]
        )
    return search_rows, size_rows


def main() -> None:
    args = _args()
    faiss.omp_set_num_threads(args.threads)
    print(f"dim {args.dim}, {args.queries} queries, k={args.k}, faiss threads {args.threads}, ", end="")
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, load {os.getloadavg()}\n")
    search_rows: list[list[object]] = []
    size_rows: list[list[object]] = []
    for n in args.sizes:
        s, z = measure(n, args)
        search_rows += s
        size_rows += z
    headers = [
        "n",
        "index",
        "build s",
        "RAM B/vec",
        "x hnsw",
        "refine pages B/vec",
        "disk B/vec",
        "index MiB",
    ]
    print_table(headers, size_rows)
    print()
    headers = ["n", "index", "setting", "recall@10", "p50 ms", "p95 ms", "p50 x hnsw", "refined"]
    print_table(headers, search_rows)
    print(f"\nload average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
