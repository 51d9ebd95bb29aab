"""The scale curve of one index version: build time, disk, and a serving node's RSS, measured
beside the capacity model's prediction, with the growth per 10x.

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.scale --sizes 10000 100000``. Each size builds a
full version (dense shards under the auto kind policy, BM25 over generated text) with the
serving defaults, then loads it in a fresh process (``load_version``, memory-mapped as a
serving node does), then queries it, reading that process's RSS before, after the load and
after 20 dense and 20 BM25 queries per shard (memory-mapped pages count once touched). Synthetic unit vectors
(``bench.common.clustered_vectors``); text drawn from a fixed vocabulary with a Zipf law.
The first size is the baseline the growth column divides by.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

from bench.common import clustered_vectors, print_table
from core.settings import Settings
from index.builder import auto_params, build_version
from index.capacity import estimate_capacity
from index.faiss_shards import choose_kind
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
        shard.lexical.search("w00001 w00007 w00042", 10, allowed=np.ones(n, dtype=bool))
print(json.dumps({"before": before, "loaded": loaded, "queried": proc.memory_info().rss}))
"""


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--shards", type=int, default=Settings().index.shards)
    parser.add_argument("--words", type=int, default=60, help="words of generated text per chunk")
    parser.add_argument("--threads", type=int, default=1, help="FAISS OpenMP threads")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def generated_texts(n: int, words: int, *, seed: int, vocabulary: int = 20_000) -> list[str]:
    """Chunk-sized texts over a Zipf-distributed vocabulary (a rough stand-in for prose)."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i:05d}" for i in range(vocabulary)])
    ranks = np.minimum(rng.zipf(1.3, size=(n, words)) - 1, vocabulary - 1)
    return [" ".join(row) for row in vocab[ranks]]


def _disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _load_rss(path: Path, dim: int) -> tuple[int, int]:
    """RSS growth of a fresh process after loading the version, and after 20 queries per shard."""
    out = subprocess.run(
        [sys.executable, "-c", _LOAD_PROBE, str(path), str(dim)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    return int(probe["loaded"]) - int(probe["before"]), int(probe["queried"]) - int(probe["before"])


def measure(n: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    settings = Settings()
    vectors, _, _ = clustered_vectors(n, 1, args.dim, seed=args.seed)
    texts = generated_texts(n, args.words, seed=args.seed)
    template = dense_params(settings)
    per_shard = -(-n // args.shards)
    kind = choose_kind(
        per_shard, flat_max=settings.index.flat_max_vectors, ivfpq_min=settings.index.ivfpq_min_vectors
    )
    started = time.perf_counter()
    path = build_version(
        root,
        f"scale-{n}",
        row_ids=np.arange(n, dtype=np.int64),
        doc_ids=np.arange(n, dtype=np.int64) // 4,
        tenant_ids=None,
        texts=texts,
        vectors=vectors,
        n_shards=args.shards,
        shard_by="document",
        dense_params_for=auto_params(
            template, flat_max=settings.index.flat_max_vectors, ivfpq_min=settings.index.ivfpq_min_vectors
        ),
        tokenizer=lexical_tokenizer(settings),
        model_name="synthetic",
        catalog_position=0,
    )
    build_s = time.perf_counter() - started
    rss_loaded, rss_queried = _load_rss(path, args.dim)
    estimate = estimate_capacity(n, args.dim, kind=kind, hnsw_m=template.hnsw_m, pq_m=template.pq_m)
    return {
        "n": n,
        "kind": kind,  # type: ignore[dict-item]
        "build_s": build_s,
        "disk": _disk_bytes(path),
        "disk_est": estimate.disk_bytes,
        "rss_loaded": rss_loaded,
        "rss": rss_queried,
        "rss_est": estimate.serve_ram_bytes,
    }


def main() -> None:
    args = _args()
    faiss.omp_set_num_threads(args.threads)
    print(f"{args.shards} shards, dim {args.dim}, {args.words} words/chunk, faiss threads {args.threads}\n")
    rows: list[list[object]] = []
    base: dict[str, float] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            m = measure(n, args, Path(tmp))
            base = base or m
            growth = n / base["n"]
            rows.append(
                [
                    f"{n:,}",
                    m["kind"],
                    m["build_s"],
                    m["build_s"] / base["build_s"],
                    m["disk"] / 2**20,
                    m["disk_est"] / 2**20,
                    m["rss_loaded"] / 2**20,
                    m["rss"] / 2**20,
                    m["rss_est"] / 2**20,
                    m["rss"] / base["rss"] if base["rss"] else float("nan"),
                    growth,
                ]
            )
            print(f"  measured {n:,}", file=sys.stderr)
    headers = ["chunks", "dense kind", "build s", "x base", "disk MiB", "model disk MiB"]
    print_table(
        [*headers, "RSS loaded MiB", "RSS queried MiB", "model RAM MiB", "RSS x base", "size x base"], rows
    )


if __name__ == "__main__":
    main()
