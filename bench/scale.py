"""The scale curve of one index version: build time, disk, a serving node's RSS and
``/v1/retrieve`` latency at a fixed rate, measured beside the capacity model's prediction,
with the growth per 10x.

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.scale --sizes 10000 100000 1000000``. Per size:
``bench.retrieve``'s synthetic corpus (384-d unit vectors around topic centres, texts of
topic words and Zipf background words), COPY'd into a throwaway catalog, one live index
version built with the serving defaults (auto kind policy, BM25), then

- the version loaded in a fresh process (``load_version``, memory-mapped as a serving node
  does), its RSS read before, after the load and after 20 dense + 20 BM25 queries per shard;
- ``ragline serve`` on it, in-process and then with ``--shard-servers`` Ray shard servers,
  ``/v1/retrieve`` (hybrid, no rerank, top_k 8, a caller reading ~77% of the chunks) at
  ``--rate`` fixed-interval arrivals for ``--duration`` seconds: client p50/p95, and the
  in-process server's own RSS (process tree) after the load.

``--rate 0`` skips the catalog and the server (build, disk and RSS only). The first size is
the baseline the growth columns divide by.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

from bench.common import print_table
from bench.load import LoadConfig, run_rates
from bench.retrieve import (
    Corpus,
    build_live_index,
    create_query_key,
    database,
    load_catalog,
    query_texts,
    retrieve_requests,
    server,
    synthetic_corpus,
)
from core.settings import Settings
from index.builder import LEXICAL_DIR, auto_params, build_version
from index.capacity import estimate_capacity
from index.faiss_shards import choose_kind
from index.manifest import read_manifest
from retrieve.delta import lexical_text
from wiring import dense_params
from wiring.index import lexical_tokenizer

# RSS of a process that loads a version, measured around the load only (imports excluded).
_LOAD_PROBE = """
import json, sys, numpy as np, psutil
from pathlib import Path
from index.builder import load_version
proc = psutil.Process()
before = proc.memory_info().rss
version = load_version(Path(sys.argv[1]))
loaded = proc.memory_info().rss
rng = np.random.default_rng(1)
for shard in version.shards:  # queries touch what a serving node keeps hot
    n = int(shard.dense.ntotal)
    for _ in range(20):
        q = rng.standard_normal((1, int(sys.argv[2])), dtype=np.float32)
        shard.dense.search(q / np.linalg.norm(q), 10, allowed=None, strategy="unfiltered")
        shard.lexical.search(sys.argv[3], 10, allowed=np.ones(n, dtype=bool))
print(json.dumps({"before": before, "loaded": loaded, "queried": proc.memory_info().rss}))
"""
DIM = 384
MiB = 2**20


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--shards", type=int, default=Settings().index.shards)
    parser.add_argument("--chunks-per-doc", type=int, default=10)
    parser.add_argument("--rate", type=float, default=5.0, help="/v1/retrieve requests/s (0 = skip)")
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds per server")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--shard-servers", type=int, default=2, help="second server column (0 = skip)")
    parser.add_argument("--threads", type=int, default=1, help="FAISS OpenMP threads")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def _disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _load_rss(path: Path, query: str) -> tuple[int, int]:
    """RSS growth of a fresh process after loading the version, and after 20 queries per shard."""
    out = subprocess.run(
        [sys.executable, "-c", _LOAD_PROBE, str(path), str(DIM), query],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    return int(probe["loaded"]) - int(probe["before"]), int(probe["queried"]) - int(probe["before"])


def _build_only(root: Path, corpus: Corpus, n: int, shards: int) -> Path:
    settings = Settings()
    ix = settings.index
    return build_version(
        root, f"scale-{n}", row_ids=np.arange(1, n + 1, dtype=np.int64),
        doc_ids=np.arange(n, dtype=np.int64) // 10, tenant_ids=None,
        texts=[lexical_text(t, ()) for t in corpus.texts], vectors=corpus.vectors, n_shards=shards,
        shard_by=ix.shard_by,
        dense_params_for=auto_params(dense_params(settings), flat_max=ix.flat_max_vectors,
                                     ivfpq_min=ix.ivfpq_min_vectors),
        tokenizer=lexical_tokenizer(settings), model_name="synthetic", catalog_position=0,
    )  # fmt: skip


def _rss_tree(pid: int) -> int:
    import psutil

    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])


def _retrieve_latency(
    url: str, data_dir: Path, token: str, queries: list[str], args: argparse.Namespace, shard_servers: int
) -> tuple[float, float, float, int]:
    """Client p50/p95 ms, throughput and the server's process-tree RSS at one fixed rate."""
    request = retrieve_requests(queries, token, top_k=8, mode="hybrid")

    config = LoadConfig(
        rate=args.rate, duration_s=args.duration, warmup_s=args.warmup, timeout_s=10.0, arrival="fixed"
    )
    extra = {"RAGLINE_INDEX__SHARD_SERVERS": str(shard_servers), "RAY_USAGE_STATS_ENABLED": "0"}
    with server(url, data_dir, env_extra=extra) as (base, pid):
        (result,) = asyncio.run(run_rates(base, request, [config]))
        rss = _rss_tree(pid)
    if result.errors or result.timeouts or not result.ok:
        raise SystemExit(f"/v1/retrieve failed at {args.rate}/s: {result}")
    return result.p50_ms, result.p95_ms, result.throughput, rss


def measure(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    settings = Settings()
    corpus = synthetic_corpus(n, seed=args.seed)
    probe_query = " ".join(corpus.topic_words[0][:3])
    template = dense_params(settings)
    kind = choose_kind(
        -(-n // args.shards),
        flat_max=settings.index.flat_max_vectors,
        ivfpq_min=settings.index.ivfpq_min_vectors,
    )
    out: dict[str, float] = {"n": n}
    if args.rate <= 0:
        started = time.perf_counter()
        path = _build_only(tmp / "indexes", corpus, n, args.shards)
        out["build_s"] = time.perf_counter() - started
        _measure_version(out, path, probe_query)
    else:
        with database(tmp) as url:
            started = time.perf_counter()
            row_ids, doc_ids = load_catalog(url, corpus, chunks_per_doc=args.chunks_per_doc, seed=args.seed)
            out["catalog_s"] = time.perf_counter() - started
            started = time.perf_counter()
            version = build_live_index(url, tmp / "indexes", corpus, row_ids, doc_ids)
            out["build_s"] = time.perf_counter() - started
            _measure_version(out, tmp / "indexes" / version, probe_query)
            token = create_query_key(url)
            count = int((args.duration + args.warmup) * args.rate * 2.5) + 50
            queries = query_texts(corpus, count, seed=args.seed + 1)
            del corpus
            modes = [0] + ([args.shard_servers] if args.shard_servers else [])
            for servers in modes:
                p50, p95, _, rss = _retrieve_latency(url, tmp, token, queries, args, servers)
                out[f"p50_{servers}"], out[f"p95_{servers}"] = p50, p95
                if servers == 0:
                    out["server_rss"] = rss
    estimate = estimate_capacity(n, DIM, kind=kind, hnsw_m=template.hnsw_m, pq_m=template.pq_m)
    out.update(disk_est=estimate.disk_bytes, rss_est=estimate.serve_ram_bytes)
    out["kind"] = kind  # type: ignore[assignment]
    return out


def _measure_version(out: dict[str, float], path: Path, probe_query: str) -> None:
    # The kind each shard was really built as: shards split by hash are not exactly n / shards.
    built = read_manifest(path).shards
    out["built"] = "+".join(f"{s.kind} {s.n_vectors:,}" for s in built)  # type: ignore[assignment]
    out["disk"] = _disk_bytes(path)
    # BM25 is not in the capacity model: report its share so the model's gap is explained.
    out["disk_lexical"] = sum(_disk_bytes(p) for p in path.glob(f"*/{LEXICAL_DIR}"))
    out["rss_loaded"], out["rss"] = _load_rss(path, probe_query)


def _get(m: dict[str, float], key: str) -> float:
    return m.get(key, float("nan"))


def _ratio(m: dict[str, float], base: dict[str, float], key: str) -> float:
    return m[key] / base[key] if key in m and base.get(key) else float("nan")


def _per_10x(m: dict[str, float], base: dict[str, float], key: str) -> float:
    """Growth per 10x chunks: the ratio to the baseline, to the power 1 / decades of size."""
    decades = math.log10(m["n"] / base["n"]) if m["n"] > base["n"] else 0.0
    ratio = _ratio(m, base, key)
    return ratio ** (1.0 / decades) if decades and ratio > 0 else float("nan")


def main() -> None:
    args = _args()
    faiss.omp_set_num_threads(args.threads)
    print(
        f"{args.shards} shards, dim {DIM}, faiss threads {args.threads}, /v1/retrieve at {args.rate:g}/s "
        f"(fixed), {args.duration:g}s measured, load {os.getloadavg()}\n"
    )
    sizes: list[list[object]] = []
    latency: list[list[object]] = []
    base: dict[str, float] | None = None
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="ragline-scale-") as tmp:
            m = measure(n, args, Path(tmp))
        base = base or m
        print(f"  measured {n:,} (load {os.getloadavg()[0]:.1f}): {m}", file=sys.stderr)
        sizes.append(
            [f"{n:,}", m["built"], _get(m, "catalog_s"), m["build_s"], _ratio(m, base, "build_s"),
             m["disk"] / MiB, m["disk_lexical"] / MiB, m["disk_est"] / MiB, _per_10x(m, base, "disk"),
             _per_10x(m, base, "disk_est"), m["rss_loaded"] / MiB, m["rss"] / MiB, m["rss_est"] / MiB,
             _per_10x(m, base, "rss"), _per_10x(m, base, "rss_est"), n / base["n"]]
        )  # fmt: skip
        if args.rate > 0:
            latency.append(
                [f"{n:,}", _get(m, "p50_0"), _get(m, "p95_0"), _get(m, f"p50_{args.shard_servers}"),
                 _get(m, f"p95_{args.shard_servers}"), _ratio(m, base, "p95_0"), _get(m, "server_rss") / MiB]
            )  # fmt: skip
    headers = [
        "chunks",
        "dense kind",
        "catalog s",
        "build s",
        "x base",
        "disk MiB",
        "of it BM25",
        "model disk MiB",
    ]
    headers += ["disk per 10x", "model per 10x", "RSS loaded MiB", "RSS queried MiB", "model RAM MiB"]
    print_table([*headers, "RSS per 10x", "model per 10x", "size x base"], sizes)
    if latency:
        print(f"\n/v1/retrieve at {args.rate:g} requests/s (client ms; shard servers: {args.shard_servers})")
        headers = [
            "chunks",
            "in-process p50",
            "p95",
            "shard servers p50",
            "p95",
            "p95 x base",
            "server RSS MiB",
        ]
        print_table(headers, latency)
    print(f"\nload average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
