"""Memory of shard servers vs in-process serving: one index version, loaded in fresh processes
the way each serving role loads it, with each process's RSS measured beside the capacity model.

Run: ``OPENBLAS_NUM_THREADS=1 python -m bench.shard_memory --chunks 100000 --shards 4 --servers 2``.
Builds one version (synthetic unit vectors, ``bench.common.generated_texts`` for BM25, a forced
dense kind, flat by default), then for each role starts a fresh process that loads it with that
role's ``ShardSelection`` (in-process: every shard and the delta's row-id lookups; shard server
i of N: shards i, i + N, ...; the API fanning out: none), runs 20 dense and 20 BM25 queries per
loaded shard and 200 row-id lookups (the delta's and explain's ``in_index``), and reads its RSS
before the load and after the queries (memory-mapped pages count once touched). The in-process
row is the baseline the ratio divides by. The catalog view (per document) and the query model
are the same in every role and not part of this measurement.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import clustered_vectors, generated_texts, print_table
from core.settings import Settings
from index.builder import auto_params, build_version
from index.capacity import estimate_capacity, split_across_servers
from wiring import dense_params
from wiring.index import lexical_tokenizer

# RSS growth of a process that loads the version as one role and queries what it loaded.
_PROBE = """
import json, sys, numpy as np, psutil
from pathlib import Path
from typing import Any
from index.builder import ShardSelection, load_version
path, dim, group, n_groups, delta = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:6])
proc = psutil.Process()
before = proc.memory_info().rss
version = load_version(Path(path), select=ShardSelection(group, n_groups, bool(delta)))
held = version.row_ids_by_shard()  # what ServingIndex keeps for in_index
loaded = proc.memory_info().rss
rng = np.random.default_rng(1)
for shard in version.shards:
    n = int(shard.dense.ntotal)
    for _ in range(20):
        q = rng.standard_normal((1, dim), dtype=np.float32)
        shard.dense.search(q / np.linalg.norm(q), 10, allowed=None, strategy="unfiltered")
        shard.lexical.search("w00001 w00007 w00042", 10, allowed=np.ones(n, dtype=bool))
total = sum(len(h) for h in held)
for rows in (rng.integers(0, total, 16) for _ in range(200)):
    for h in held:
        at = np.searchsorted(h, rows).clip(0, len(h) - 1)
        np.asarray(h[at])
print(json.dumps({"before": before, "loaded": loaded, "queried": proc.memory_info().rss,
                  "shards": [p.shard for p in version.shards]}))
"""


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--kind", choices=["flat", "hnsw", "ivfpq"], default="flat")
    parser.add_argument("--words", type=int, default=60, help="words of generated text per chunk")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def _probe(path: Path, dim: int, group: int, n_groups: int, delta: bool) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path), str(dim), str(group), str(n_groups), str(int(delta))],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _build(args: argparse.Namespace, root: Path) -> Path:
    settings = Settings()
    vectors, _, _ = clustered_vectors(args.chunks, 1, args.dim, seed=args.seed)
    return build_version(
        root,
        "shard-memory",
        row_ids=np.arange(args.chunks, dtype=np.int64),
        doc_ids=np.arange(args.chunks, dtype=np.int64) // 4,
        tenant_ids=None,
        texts=generated_texts(args.chunks, args.words, seed=args.seed),
        vectors=vectors,
        n_shards=args.shards,
        shard_by="document",
        dense_params_for=auto_params(dense_params(settings), flat_max=0, ivfpq_min=0, force=args.kind),
        tokenizer=lexical_tokenizer(settings),
        model_name="synthetic",
        catalog_position=0,
    )


def main() -> None:
    args = _args()
    template = dense_params(Settings())
    report = estimate_capacity(
        args.chunks, args.dim, kind=args.kind, hnsw_m=template.hnsw_m, pq_m=template.pq_m
    )
    share = split_across_servers(report, n_shards=args.shards, n_servers=args.servers)
    roles: list[tuple[str, int, int, bool, int]] = [("in-process", 0, 1, True, report.serve_ram_bytes)]
    roles += [
        (f"shard server {i}", i, args.servers, i == 0, share.server_ram_bytes) for i in range(args.servers)
    ]
    roles.append(("API (fan-out)", 0, 0, False, 0))
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        path = _build(args, Path(tmp))
        print(
            f"{args.chunks:,} chunks x {args.dim}, {args.shards} {args.kind} shards, {args.servers} servers;"
            f" built in {time.perf_counter() - started:.1f} s\n"
        )
        rows: list[list[object]] = []
        base: float | None = None
        for name, group, n_groups, delta, estimate in roles:
            got = _probe(path, args.dim, group, n_groups, delta)
            before, loaded, queried = (int(got[k]) for k in ("before", "loaded", "queried"))
            grown = (queried - before) / 2**20
            base = grown if base is None else base
            shards = ",".join(str(s) for s in got["shards"]) or "-"
            rows.append([name, shards, (loaded - before) / 2**20, grown, grown / base, estimate / 2**20])
            print(f"  measured {name}", file=sys.stderr)
    print_table(
        ["process", "shards", "RSS loaded MiB", "RSS queried MiB", "x in-process", "model RAM MiB"], rows
    )


if __name__ == "__main__":
    main()
